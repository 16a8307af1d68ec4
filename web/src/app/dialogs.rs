//! The dialogs: Help (the shortcuts), Settings (the runner URL and token, checked on save),
//! Share (the full link, a short link made by the runner, an embed snippet) and the language
//! reference (`reference.rs`, fetched as `reference.json`; docs/language.md is the same table).

use super::{pane_key, Dialog, RunnerStatus, ShortLink, Ui, PANES};
use crate::examples;
use crate::js;
use crate::runner::Settings;
use leptos::ev;
use leptos::prelude::*;

#[component]
pub(super) fn DialogView(ui: Ui, dialog: Dialog) -> impl IntoView {
    let close = move |_| ui.dialog.set(None);
    let body = match dialog {
        Dialog::Help => view! {
            <h2>"Shortcuts"</h2>
            <table class="keys">
                <tr><td><kbd>"Ctrl"</kbd>"+"<kbd>"Enter"</kbd></td><td>"Run on the runner's GPU"</td></tr>
                <tr><td><kbd>"Ctrl"</kbd>"+"<kbd>"S"</kbd></td><td>"Share: make and copy a short link (needs the runner)"</td></tr>
                <tr><td><kbd>"Ctrl"</kbd>"+"<kbd>"Space"</kbd></td><td>"Complete a name (ops, schedule primitives, tensors, parallel types)"</td></tr>
                <tr><td><kbd>"Ctrl"</kbd>"+"<kbd>"/"</kbd></td><td>"Comment or uncomment the lines"</td></tr>
                <tr><td><kbd>"Ctrl"</kbd>"+"<kbd>"F"</kbd></td><td>"Search (in the editor or a viewer)"</td></tr>
                <tr><td><kbd>"Ctrl"</kbd>"+"<kbd>"Z"</kbd>" / "<kbd>"Ctrl"</kbd>"+"<kbd>"Shift"</kbd>"+"<kbd>"Z"</kbd></td><td>"Undo / redo"</td></tr>
                <tr><td><kbd>"Tab"</kbd>" / "<kbd>"Shift"</kbd>"+"<kbd>"Tab"</kbd></td><td>"Indent / dedent"</td></tr>
                <tr><td><kbd>"←"</kbd>" "<kbd>"→"</kbd>" on the divider"</td><td>"Resize the editor and the panes"</td></tr>
                <tr>
                    <td><kbd>"Alt"</kbd>"+"<kbd>"1"</kbd>" … "<kbd>{PANES.len().to_string()}</kbd></td>
                    <td>{PANES.iter().map(|p| p.1).collect::<Vec<_>>().join(", ")}</td>
                </tr>
                <tr><td><kbd>"Shift"</kbd>"+"<kbd>"Alt"</kbd>"+"<kbd>"F"</kbd></td><td>"Format the program (indentation and spacing; comments kept)"</td></tr>
                <tr><td><kbd>"F1"</kbd></td><td>"This help"</td></tr>
                <tr><td><kbd>"Esc"</kbd></td><td>"Close a dialog"</td></tr>
            </table>
            <p class="note">
                "The program compiles in the page on every edit; Problems under the editor lists every error \
                 (click one to go there). The address bar always holds the whole state (program, sizes, \
                 panes), and this browser keeps it: the bare address reopens your last program. Share shows \
                 the full link, a short link and an embed snippet. Passes that changed nothing are greyed. \
                 \"+ B\" opens a second program (a copy of A): the panes follow the tab shown, and Run \
                 then times A and B interleaved and shows B/A. Hover a name in the editor for its \
                 documentation; Reference lists the whole language."
            </p>
        }
        .into_any(),
        Dialog::Share => share_dialog(ui),
        Dialog::Reference => reference_view().into_any(),
        Dialog::Settings => {
            let s = ui.settings.get_untracked();
            let url = RwSignal::new(s.url);
            let token = RwSignal::new(s.token);
            view! {
                <h2>"Runner"</h2>
                <p class="note">
                    "Empty URL: this page's own origin (the runner serves the playground). The token is sent as a \
                     bearer token and stays in this browser."
                </p>
                <label class="field">
                    "Runner URL"
                    <input
                        id="runner-url"
                        type="url"
                        placeholder="https://runner.example:8080"
                        prop:value=move || url.get()
                        on:input=move |ev| url.set(event_target_value(&ev))
                    />
                </label>
                <label class="field">
                    "Token"
                    <input
                        id="runner-token"
                        type="password"
                        autocomplete="off"
                        prop:value=move || token.get()
                        on:input=move |ev| token.set(event_target_value(&ev))
                    />
                </label>
                <p class="note">
                    {move || match ui.runner.get() {
                        RunnerStatus::Checking => "Checking…".to_string(),
                        RunnerStatus::Up(d) | RunnerStatus::Fake(d) => format!("Reachable: {d}"),
                        RunnerStatus::NoGpu(d) => format!("Reachable, no GPU: {d}"),
                        RunnerStatus::Down(m) => m,
                    }}
                </p>
                <div class="buttons">
                    <button
                        id="settings-save"
                        class="primary"
                        on:click=move |_| {
                            let s = Settings { url: url.get_untracked().trim().to_string(), token: token.get_untracked().trim().to_string() };
                            s.save();
                            ui.settings.set(s);
                            ui.check_runner();
                        }
                    >
                        "Save and check"
                    </button>
                </div>
            }
            .into_any()
        }
    };
    view! {
        <div class="overlay" on:click=close>
            <div
                class="dialog"
                role="dialog"
                aria-modal="true"
                class:wide=dialog == Dialog::Reference
                id=match dialog {
                    Dialog::Help => "help-dialog",
                    Dialog::Settings => "settings-dialog",
                    Dialog::Share => "share-dialog",
                    Dialog::Reference => "reference-dialog",
                }
                on:click=|e| e.stop_propagation()
            >
                <button class="close" aria-label="close" on:click=close>"×"</button>
                {body}
            </div>
        </div>
    }
}

/// A read-only text box with a Copy button.
fn copy_field(
    ui: Ui,
    id: &'static str,
    label: &'static str,
    text: impl Fn() -> String + Send + Sync + Clone + 'static,
    what: &'static str,
    multiline: bool,
) -> impl IntoView {
    let text2 = text.clone();
    let field = if multiline {
        view! { <textarea id=id readonly rows="3" prop:value=text on:focus=|e| select_target(&e)></textarea> }
            .into_any()
    } else {
        view! { <input id=id type="text" readonly prop:value=text on:focus=|e| select_target(&e) /> }
            .into_any()
    };
    view! {
        <div class="field">
            <span>{label}</span>
            <div class="copy-row">
                {field}
                <button id=format!("{id}-copy") on:click=move |_| ui.copy_shared(text2(), what)>"Copy"</button>
            </div>
        </div>
    }
}

fn select_target(e: &ev::FocusEvent) {
    use wasm_bindgen::JsCast;
    if let Some(t) = e.target() {
        if let Ok(i) = t.clone().dyn_into::<web_sys::HtmlInputElement>() {
            i.select();
        } else if let Ok(a) = t.dyn_into::<web_sys::HtmlTextAreaElement>() {
            a.select();
        }
    }
}

/// The Share dialog: the full link (the whole state, no server), a short link made by the
/// runner, and an embed snippet (an iframe of the read-only view with one pane).
fn share_dialog(ui: Ui) -> AnyView {
    let full = move || ui.full_link();
    let embed = move || {
        let pane = ui.embed_pane.get();
        let title = ui
            .compiled
            .with_untracked(|c| c.as_ref().map(|c| c.plan.kernel_name.clone()))
            .unwrap_or_else(|| "program".into());
        format!(
            "<iframe src=\"{}\" title=\"hopfuse: {title}\" width=\"100%\" height=\"480\" style=\"border: 1px solid #d8dde3; border-radius: 6px\" loading=\"lazy\"></iframe>",
            ui.embed_link(pane)
        )
    };
    view! {
        <h2>"Share"</h2>
        {copy_field(ui, "share-url", "Full link: the whole state is in it; no server keeps anything", full, "Link", false)}
        <div class="field">
            <span>"Short link: kept by the runner"</span>
            {move || match ui.short.get() {
                ShortLink::None => view! {
                    <div class="copy-row">
                        <button id="make-short" on:click=move |_| ui.short_link()>"Make a short link"</button>
                    </div>
                }
                .into_any(),
                ShortLink::Making => view! { <p class="note" id="short-making">"Asking the runner…"</p> }.into_any(),
                ShortLink::Made(url) => {
                    let u = url.clone();
                    view! {
                        <div class="copy-row">
                            <input id="share-short" type="text" readonly prop:value=url on:focus=|e| select_target(&e) />
                            <button id="share-short-copy" on:click=move |_| ui.copy_shared(u.clone(), "Short link")>"Copy"</button>
                        </div>
                    }
                    .into_any()
                }
                ShortLink::Failed(why) => view! { <p class="error" id="short-error">{why}</p> }.into_any(),
            }}
        </div>
        <div class="field">
            <span>"Embed: a read-only view of the program and one pane, for blog posts and docs"</span>
            <div class="copy-row">
                <select
                    id="embed-pane"
                    aria-label="pane to embed"
                    prop:value=move || pane_key(ui.embed_pane.get())
                    on:change=move |ev| {
                        let key = event_target_value(&ev);
                        if let Some((p, _, _)) = PANES.iter().find(|(p, _, _)| pane_key(*p) == key) {
                            ui.embed_pane.set(*p);
                        }
                    }
                >
                    {PANES
                        .iter()
                        .filter(|p| p.2)
                        .map(|&(p, label, _)| view! { <option value=pane_key(p)>{label}</option> })
                        .collect_view()}
                </select>
                <a id="embed-preview" href=move || ui.embed_link(ui.embed_pane.get()) target="_blank" rel="noopener">"Preview ↗"</a>
            </div>
        </div>
        {copy_field(ui, "share-embed", "Embed snippet (HTML)", embed, "Embed snippet", true)}
    }
    .into_any()
}

/// The language reference: its tables come from `reference.json` (web/src/reference.rs; docs/language.md
/// is the same table), fetched the first time they are shown; the examples are the menu's.
fn reference_view() -> impl IntoView {
    let tables = NodeRef::<leptos::html::Div>::new();
    Effect::new(move |_| {
        if let Some(el) = tables.get() {
            js::fill_reference(&el);
        }
    });
    let examples = examples::grouped()
        .into_iter()
        .map(|(group, list)| {
            let items = list
                .into_iter()
                .map(|e| {
                    view! {
                        <li><span class="mono">{examples::key(&e)}</span>": "{examples::description(&e)}</li>
                    }
                })
                .collect_view();
            view! { <h4>{examples::group_title(group)}</h4><ul class="ref-examples">{items}</ul> }
        })
        .collect_view();
    view! {
        <h2>"Language reference"</h2>
        <p class="note">
            "A program is a " <code>"fusion"</code> " (tensors and ops) and an optional " <code>"schedule"</code>
            " (how its loops are split, parallelized, cached and pipelined). Axes count from 0, outermost first. \
             In the editor, Ctrl+Space completes these names and the program's tensors; hovering a name shows its entry. \
             The same table is docs/language.md in the repository."
        </p>
        <div id="ref-tables" node_ref=tables></div>
        <h3 id="ref-section-examples">"Examples (the Examples menu)"</h3>
        {examples}
    }
}
