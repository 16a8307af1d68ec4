//! The whole playground: the header (examples, sizes, Run, Tune, Share, Settings, theme, Reference,
//! help), a first visit's welcome (what the page is, what to try), the editor with its tabs and
//! Problems, the output panes, the status bar (lowering time, the first problem, the runner)
//! and the toast; the page's events (the address bar's `hashchange`, `beforeunload` with
//! unshared edits, the keyboard shortcuts, a size change that changes Run's index type).

use super::dialogs::DialogView;
use super::editor::{EditorTabs, Problems, ScalarBox, SizeBox, Splitter};
use super::panes::{pane_body, PaneTab};
use super::{
    pane_key, Dialog, RunState, RunnerStatus, Ui, DEFAULT_SIZE, MAX_COMPILE_DELAY_MS, PANES,
};
use crate::examples;
use crate::inspect_panes;
use crate::js;
use crate::model;
use crate::share::{Pane, Tab};
use leptos::ev;
use leptos::html;
use leptos::prelude::*;
use wasm_bindgen::prelude::*;

/// The whole playground.
#[component]
pub(super) fn Playground(ui: Ui) -> impl IntoView {
    let editor_ref = NodeRef::<html::Div>::new();
    let main_ref = NodeRef::<html::Main>::new();
    ui.check_runner();
    create_editor(ui, editor_ref);
    keep_state(ui);
    listen_to_window(ui);
    // The PTX and SASS panes ask the service while one of them is shown.
    let inspector = inspect_panes::Inspector::new(
        Signal::derive(move || ui.shown_text()),
        ui.sizes.into(),
        DEFAULT_SIZE,
        ui.compiled.into(),
        Signal::derive(move || ui.diags.with(|d| d.is_empty())),
        ui.settings.into(),
        Signal::derive(move || matches!(ui.pane.get(), Pane::Ptx | Pane::Sass)),
    );

    let welcome = RwSignal::new(crate::storage_get(WELCOME_KEY).is_none());

    view! {
        <TopBar ui=ui />
        {move || welcome.get().then(|| view! { <Welcome ui=ui shown=welcome /> })}
        <main
            node_ref=main_ref
            class="main"
            style=move || format!("--split: {:.1}%", ui.split.get())
        >
            <section class="editor-pane">
                <EditorTabs ui=ui />
                <div class="editor" node_ref=editor_ref></div>
                <Problems ui=ui />
            </section>
            <Splitter ui=ui main_ref=main_ref />
            <section class="output">
                <nav class="tabs" role="tablist">
                    {PANES
                        .iter()
                        .map(|&(pane, label, _)| view! { <PaneTab ui=ui pane=pane label=label /> })
                        .collect_view()}
                </nav>
                {PANES
                    .iter()
                    .map(|&(pane, _, _)| {
                        let scroll = !matches!(
                            pane,
                            Pane::Cuda | Pane::Passes | Pane::Pipeline | Pane::Torch | Pane::Ptx | Pane::Sass
                        );
                        // A pane's body is made when its tab is first shown, then kept (its
                        // viewers, scroll and folds stay): the hidden panes' CodeMirror views,
                        // IR text and diagrams cost a cold load about 150 ms before the first
                        // CUDA appears, for panes a user may never open.
                        let opened = Memo::new(move |was: Option<&bool>| {
                            was.copied().unwrap_or(false) || ui.pane.get() == pane
                        });
                        view! {
                            <div
                                class="pane"
                                class:scroll=scroll
                                id=format!("pane-{}", pane_key(pane))
                                class:hidden=move || ui.pane.get() != pane
                            >
                                {move || opened.get().then(|| pane_body(ui, pane, Some(inspector)))}
                            </div>
                        }
                    })
                    .collect_view()}
            </section>
        </main>
        <StatusBar ui=ui />
        <div id="toast" class="toast" class:hidden=move || ui.toast.with(|t| t.is_none())>
            {move || ui.toast.get().map(|t| t.1).unwrap_or_default()}
        </div>
        {move || ui.dialog.get().map(|d| view! { <DialogView ui=ui dialog=d /> })}
    }
}

/// The editor, once its element exists: each change compiles, its shortcuts run and share.
fn create_editor(ui: Ui, editor_ref: NodeRef<html::Div>) {
    Effect::new(move |_| {
        let Some(el) = editor_ref.get() else { return };
        if ui.editor.with_value(|e| e.is_some()) {
            return;
        }
        let on_change =
            Closure::<dyn FnMut(String)>::new(move |text: String| ui.compile(text)).into_js_value();
        let on_shortcut =
            Closure::<dyn FnMut(String)>::new(move |name: String| match name.as_str() {
                "run" => ui.run(),
                "short-link" => ui.short_link(),
                _ => {}
            })
            .into_js_value();
        let ed = js::FusionEditor::new(
            &el,
            &ui.program.get_untracked(),
            MAX_COMPILE_DELAY_MS,
            &on_change,
            &on_shortcut,
        );
        if ui.tab.get_untracked() == Tab::B {
            ed.switch_to(Tab::B.key(), &ui.text_of(Tab::B));
        }
        ed.focus();
        ui.editor.set_value(Some(ed));
        ui.push_diagnostics();
    });
}

/// The address bar and localStorage always hold the whole state; sizes that change the index
/// type compile again.
fn keep_state(ui: Ui) {
    // The address bar and localStorage always hold the whole state.
    Effect::new(move |_| {
        ui.program.track();
        ui.program_b.track();
        ui.tab.track();
        ui.sizes.track();
        ui.pane.track();
        ui.pass.track();
        ui.pass_mode.track();
        ui.iters.track();
        ui.seed.track();
        if ui.ready.get() {
            ui.write_fragment();
        }
    });

    // Sizes that change the index type Run picks (a tensor of 2^31 elements or more) compile
    // the program again, so the panes show the variant Run builds.
    Effect::new(move |_| {
        let stale = ui.sizes.with(|s| {
            ui.compiled.with_untracked(|c| {
                c.as_ref()
                    .is_some_and(|c| model::index_type_for(&c.plan, s).0 != c.plan.index_type)
            })
        });
        if stale {
            ui.compile(ui.text_of(ui.tab.get_untracked()));
        }
    });
}

/// The window's events: the address bar's fragment, closing with unshared edits, shortcuts.
fn listen_to_window(ui: Ui) {
    let _ = window_event_listener(ev::hashchange, move |_| {
        let hash = window().location().hash().unwrap_or_default();
        if ui.written.with_untracked(|w| *w != hash) {
            ui.restore(&hash);
        }
    });
    // Closing with edits that were never shared asks first (the browser's own dialog).
    let _ = window_event_listener(ev::beforeunload, move |e: web_sys::BeforeUnloadEvent| {
        if ui.unshared_edits() {
            e.prevent_default();
            e.set_return_value("");
        }
    });
    let _ = window_event_listener(ev::keydown, move |e: web_sys::KeyboardEvent| {
        let cmd = e.ctrl_key() || e.meta_key();
        if e.key() == "Escape" && ui.dialog.get_untracked().is_some() {
            ui.dialog.set(None);
            return;
        }
        if e.default_prevented() {
            return; // the editor handled it
        }
        if cmd && e.key() == "Enter" {
            e.prevent_default();
            ui.run();
        } else if cmd && e.key().eq_ignore_ascii_case("s") {
            e.prevent_default();
            ui.short_link();
        } else if let Some(i) = e
            .alt_key()
            .then(|| e.key().parse::<usize>().ok())
            .flatten()
            .filter(|i| !cmd && (1..=PANES.len()).contains(i))
        {
            e.prevent_default();
            ui.pane.set(PANES[i - 1].0);
        } else if e.alt_key() && e.shift_key() && !cmd && e.code() == "KeyF" {
            e.prevent_default();
            ui.format();
        } else if e.key() == "F1" {
            e.prevent_default();
            ui.dialog.set(Some(Dialog::Help));
        }
    });
}

/// The top bar: examples, sizes and scalar inputs, Run and Tune, Share, Settings, theme,
/// Reference and help.
#[component]
fn TopBar(ui: Ui) -> impl IntoView {
    let symbols = Memo::new(move |_| {
        ui.compiled
            .with(|c| c.as_ref().map(|c| c.symbols.clone()).unwrap_or_default())
    });
    let scalar_inputs = Memo::new(move |_| {
        ui.compiled
            .with(|c| c.as_ref().map(|c| c.scalars.clone()).unwrap_or_default())
    });
    let run_blocked = move || ui.runner.with(|r| r.run_blocked());

    view! {
        <header class="bar">
            <span class="logo">"hopfuse"</span>
            <select
                id="examples"
                aria-label="examples"
                title=move || {
                    examples::matching(&ui.shown_text())
                        .map(|e| examples::description(&e))
                        .unwrap_or_else(|| "Load an example program (with its benchmark sizes)".into())
                }
                prop:value=move || {
                    examples::matching(&ui.shown_text()).map(|e| examples::key(&e)).unwrap_or_default()
                }
                on:change=move |ev| {
                    if let Some(e) = examples::find(&event_target_value(&ev)) {
                        ui.load_example(e);
                    }
                }
            >
                <option value="">"Examples…"</option>
                {examples::grouped()
                    .into_iter()
                    .map(|(group, list)| {
                        view! {
                            <optgroup label=examples::group_title(group)>
                                {list
                                    .into_iter()
                                    .map(|e| {
                                        let desc = examples::description(&e);
                                        view! {
                                            <option value=examples::key(&e) title=desc.clone()>
                                                {format!("{} — {desc}", e.name)}
                                            </option>
                                        }
                                    })
                                    .collect_view()}
                            </optgroup>
                        }
                    })
                    .collect_view()}
            </select>
            <span class="sizes" title="problem sizes (used by the launch plan and Run)">
                {move || {
                    symbols
                        .get()
                        .into_iter()
                        .map(|sym| view! { <SizeBox ui=ui sym=sym /> })
                        .collect_view()
                }}
            </span>
            <span class="sizes scalars" title="scalar inputs (sent with Run; empty: the program's value)">
                {move || {
                    scalar_inputs
                        .get()
                        .into_iter()
                        .map(|input| view! { <ScalarBox ui=ui input=input /> })
                        .collect_view()
                }}
            </span>
            <span class="spacer"></span>
            <span id="run-wrap" title=move || run_blocked().unwrap_or("Run on the runner's GPU (Ctrl+Enter)")>
                <button
                    id="run"
                    class="primary"
                    disabled=move || matches!(ui.run.get(), RunState::Active { .. }) || run_blocked().is_some()
                    on:click=move |_| ui.run()
                >
                    "▶ Run"
                </button>
            </span>
            <span
                id="tune-wrap"
                title=move || {
                    super::tune::tune_blocked(ui)
                        .unwrap_or("Tune: the automatic scheduler's candidates run and timed on the runner's GPU, the fastest offered as the schedule")
                }
            >
                <button
                    id="tune"
                    disabled=move || super::tune::tune_blocked(ui).is_some()
                    on:click=move |_| ui.tune()
                >
                    "Tune"
                </button>
            </span>
            <button id="share" title="Full link, short link and embed snippet (Ctrl+S)" on:click=move |_| ui.share()>
                "Share"
            </button>
            <button id="settings" title="Runner URL and token" on:click=move |_| ui.dialog.set(Some(Dialog::Settings))>
                "Settings"
            </button>
            <button
                id="theme"
                title="Light or dark theme"
                on:click=move |_| {
                    let d = !ui.dark.get_untracked();
                    ui.dark.set(d);
                    crate::storage_set("hopfuse.theme", if d { "dark" } else { "light" });
                }
            >
                {move || if ui.dark.get() { "☀ Light" } else { "☾ Dark" }}
            </button>
            <button id="reference" title="The language: ops, schedule primitives, parallel types" on:click=move |_| ui.dialog.set(Some(Dialog::Reference))>
                "Reference"
            </button>
            <button id="help" title="Shortcuts (F1)" on:click=move |_| ui.dialog.set(Some(Dialog::Help))>
                "?"
            </button>
        </header>
    }
}

/// The status bar: lowering time, problems, the runner's state.
#[component]
fn StatusBar(ui: Ui) -> impl IntoView {
    view! {
        <footer class="status">
            <span id="lowered">
                {move || ui.lower_ms.get().map(|ms| format!("lowered in {ms:.1} ms")).unwrap_or_default()}
            </span>
            <span id="diagnostics" class="diag">
                {move || {
                    ui.diags
                        .with(|d| match d.first() {
                            None => String::new(),
                            Some(f) if d.len() == 1 => format!("1 problem: {}", f.located()),
                            Some(f) => format!("{} problems; the first: {}", d.len(), f.located()),
                        })
                }}
            </span>
            <span class="spacer"></span>
            <button
                id="runner-status"
                class="link"
                title="Runner settings"
                on:click=move |_| ui.dialog.set(Some(Dialog::Settings))
            >
                {move || match ui.runner.get() {
                    RunnerStatus::Checking => "runner: checking…".to_string(),
                    RunnerStatus::Up(d) => format!("● {d}"),
                    RunnerStatus::Fake(_) => "◐ fake runner: no GPU, runs are checked, not measured".to_string(),
                    RunnerStatus::NoGpu(_) => "◐ runner without a GPU (compile only)".to_string(),
                    RunnerStatus::Down(_) => "○ no runner (compile only)".to_string(),
                }}
            </button>
        </footer>
    }
}

/// localStorage: the welcome was dismissed.
const WELCOME_KEY: &str = "hopfuse.welcomed";
/// The example the welcome opens: tensor cores with a pipeline worth looking at.
const WELCOME_EXAMPLE: &str = "matmul/step4_two_consumers";

/// A first visit's welcome: what the page is and what to try; dismissed for good in this
/// browser by either button.
#[component]
fn Welcome(ui: Ui, shown: RwSignal<bool>) -> impl IntoView {
    let dismiss = move || {
        shown.set(false);
        crate::storage_set(WELCOME_KEY, "yes");
    };
    view! {
        <div id="welcome" class="welcome" role="note">
            <span>
                <strong>"The hopfuse playground. "</strong>
                "Write a fusion (tensors and ops) and its schedule in the editor: every edit compiles in this \
                 page to CUDA, the IR after each pass, the launch plan and a diagram of the pipeline. To try it: \
                 pick a tensor-core example, open Pipeline, press Run."
            </span>
            <button
                id="welcome-try"
                class="primary"
                on:click=move |_| {
                    dismiss();
                    if let Some(e) = examples::find(WELCOME_EXAMPLE) {
                        ui.load_example(e);
                    }
                    ui.pane.set(Pane::Pipeline);
                }
            >
                "Open a tensor-core example"
            </button>
            <button id="welcome-close" class="link" on:click=move |_| dismiss()>"Dismiss"</button>
        </div>
    }
}
