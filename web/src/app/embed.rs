//! The read-only embed view (`?embed=PANE`): the program in a viewer and one embeddable pane
//! of the state in the fragment, with a link that opens the same state in the playground.
//! Nothing is written to the address bar or to localStorage (`Ui::embedded`).

use super::panes::pane_body;
use super::{pane_key, Ui, PANES};
use crate::js;
use crate::share::Pane;
use leptos::html;
use leptos::prelude::*;

/// The read-only embed view (`?embed=PANE#v1:...`): the program and one pane, with a link to
/// open the same state in the playground.
#[component]
pub(super) fn Embed(ui: Ui, pane: Pane) -> impl IntoView {
    let program_ref = NodeRef::<html::Div>::new();
    let viewer: StoredValue<Option<js::CodeViewer>, LocalStorage> = StoredValue::new_local(None);
    ui.pane.set(pane);
    Effect::new(move |_| {
        let text = ui.shown_text();
        let Some(el) = program_ref.get() else { return };
        if viewer.with_value(|v| v.is_none()) {
            viewer.set_value(Some(js::CodeViewer::new(&el, "fusion")));
        }
        viewer.with_value(|v| {
            if let Some(v) = v {
                v.set_text(&text);
            }
        });
    });
    let open = move || {
        let loc = window().location();
        format!(
            "{}{}{}",
            loc.origin().unwrap_or_default(),
            loc.pathname().unwrap_or_default(),
            loc.hash().unwrap_or_default()
        )
    };
    let label = PANES
        .iter()
        .find(|(p, _, _)| *p == pane)
        .map_or("", |(_, l, _)| l);
    view! {
        <header class="bar embed-bar">
            <span class="logo">"hopfuse"</span>
            <span class="mono">
                {move || ui.compiled.with(|c| c.as_ref().map(|c| c.plan.kernel_name.clone()).unwrap_or_default())}
            </span>
            <span class="note">{format!("· {label}")}</span>
            <span class="spacer"></span>
            <a id="open-playground" href=open target="_blank" rel="noopener">"Open in the playground ↗"</a>
        </header>
        <main class="main embed">
            <section class="editor-pane">
                <div class="viewer" id="embed-program" node_ref=program_ref></div>
            </section>
            <section class="output">
                <div class="pane" class:scroll=!matches!(pane, Pane::Cuda | Pane::Passes | Pane::Pipeline | Pane::Torch) id=format!("pane-{}", pane_key(pane))>
                    {pane_body(ui, pane, None)}
                </div>
            </section>
        </main>
        <footer class="status">
            <span id="diagnostics" class="diag">
                {move || ui.diags.with(|d| d.first().map(|f| format!("the program has errors: {}", f.located())).unwrap_or_default())}
            </span>
        </footer>
    }
}
