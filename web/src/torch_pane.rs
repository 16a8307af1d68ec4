//! PyTorch in the playground: the PyTorch pane (the Python snippet that calls the program with
//! the `hopfuse` package at Run's sizes, see `python_snippet`, and the program's torch twin,
//! emitted in the page by `hopfuse::torch_twin` with every successful compile, see
//! `model::Compiled::torch`), the
//! "vs torch" toggle that asks the runner for peers (`"peers": true`, docs/api.md), and the Run
//! pane's line "x1.30 vs torch.compile" with its spread, read from `result.peers` of the `done`
//! event.

use crate::js;
use crate::model::Compiled;
use hopfuse_api::service::RunBody;
use leptos::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

/// localStorage key of the toggle.
const PEERS_KEY: &str = "hopfuse.peers";

/// One peer of a run (`result.peers.peers[]`).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct PeerView {
    pub name: String,
    pub median_us: Option<f64>,
    pub min_us: Option<f64>,
    pub max_us: Option<f64>,
    pub passed: bool,
    pub compile_s: Option<f64>,
    /// The peer's median / the kernel's (above 1: hopfuse is faster).
    pub speedup: Option<f64>,
    pub error: Option<String>,
}

/// `result.peers`: the torch twin timed eagerly and under torch.compile in the same run.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct PeersView {
    pub unavailable: Option<String>,
    pub torch: Option<String>,
    pub rounds: Option<u64>,
    pub peers: Vec<PeerView>,
    pub best: Option<String>,
    pub speedup: Option<f64>,
    /// Smallest and largest per-round ratio.
    pub spread: Option<(f64, f64)>,
}

impl PeersView {
    /// `x1.30 vs torch.compile`, `peers unavailable: ...` or `no peer validated`.
    pub fn headline(&self) -> String {
        if let Some(why) = &self.unavailable {
            return format!("peers unavailable: {why}");
        }
        match (&self.best, self.speedup) {
            (Some(best), Some(x)) => format!("x{x:.2} vs {best}"),
            _ => "no peer validated".into(),
        }
    }

    /// `x1.25 – x1.34 over 5 rounds`.
    pub fn spread_text(&self) -> Option<String> {
        let (lo, hi) = self.spread?;
        let rounds = self
            .rounds
            .map(|r| format!(" over {r} rounds"))
            .unwrap_or_default();
        Some(format!("x{lo:.2} – x{hi:.2}{rounds}"))
    }
}

/// Whether runs ask for peers (the toggle, kept in localStorage).
pub fn wanted() -> bool {
    crate::storage_get(PEERS_KEY).as_deref() == Some("on")
}

/// Asks for peers in a run body when the toggle is on.
pub fn add_to_request(body: &mut RunBody) {
    if wanted() {
        body.peers = Some(true);
    }
}

/// The Run pane's toggle: also time the torch twin (eager, torch.compile) on the runner.
#[component]
pub fn PeersToggle() -> impl IntoView {
    let on = RwSignal::new(wanted());
    view! {
        <label title="Also time the program's PyTorch twin, eagerly and under torch.compile, interleaved with the kernel on the runner's GPU (needs torch there)">
            <input
                type="checkbox"
                id="peers-toggle"
                prop:checked=move || on.get()
                on:change=move |ev| {
                    let v = event_target_checked(&ev);
                    on.set(v);
                    crate::storage_set(PEERS_KEY, if v { "on" } else { "off" });
                }
            />
            " vs torch"
        </label>
    }
}

/// The peers of a measured run as HTML (one `inner_html`, as the Pipeline pane does: far less
/// wasm than a view per cell): hopfuse against the best peer with the spread, then each peer.
/// Element ids only on the `primary` result.
pub fn peers_html(p: &PeersView, primary: bool) -> String {
    use crate::pipeline::esc;
    use std::fmt::Write;
    let id = |name: &str| {
        if primary {
            format!(" id=\"{name}\"")
        } else {
            String::new()
        }
    };
    if p.unavailable.is_some() {
        return format!(
            "<p class=\"note\"{}>{}</p>",
            id("vs-torch"),
            esc(&p.headline())
        );
    }
    let mut h = format!(
        "<div class=\"big vs-torch\"{} title=\"median time of the fastest validated PyTorch peer / \
         the kernel's median: above 1, hopfuse is faster\"><span class=\"label\">vs PyTorch</span>\
         <span class=\"value\">{}</span><span class=\"spread\"{}>{}</span></div>\
         <table class=\"params\"{}><tr><th>peer</th><th>time</th><th></th><th></th><th></th></tr>",
        id("vs-torch"),
        esc(&p.headline()),
        id("vs-torch-spread"),
        esc(&p.spread_text().unwrap_or_default()),
        id("peers")
    );
    let us = |x: Option<f64>| x.map_or("—".into(), |x| format!("{x:.2}"));
    for q in &p.peers {
        let time = match (q.median_us, &q.error) {
            (Some(m), _) => format!(
                "median {m:.2} µs (min {} max {})",
                us(q.min_us),
                us(q.max_us)
            ),
            (None, e) => format!("not timed: {}", e.as_deref().unwrap_or("")),
        };
        let _ = write!(
            h,
            "<tr class=\"{}\"><td class=\"mono\">{}</td><td class=\"mono\">{}</td>\
             <td class=\"mono\">{}</td><td>{}</td><td class=\"mono\">{}</td></tr>",
            if q.passed { "ok" } else { "bad" },
            esc(&q.name),
            esc(&time),
            q.speedup
                .map(|x| format!("hopfuse x{x:.2}"))
                .unwrap_or_default(),
            if q.passed { "validated" } else { "FAIL" },
            q.compile_s
                .map(|c| format!("compiled in {c:.1} s (not timed)"))
                .unwrap_or_default()
        );
    }
    h.push_str("</table>");
    if let Some(t) = &p.torch {
        let _ = write!(
            h,
            "<p class=\"note\">torch {}, timed interleaved with the kernel in the same run</p>",
            esc(t)
        );
    }
    h
}

/// A read-only CodeMirror with Python highlighting showing `text`, made when its node is first
/// there.
fn python_viewer(text: impl Fn() -> Option<String> + 'static) -> NodeRef<leptos::html::Div> {
    let node = NodeRef::<leptos::html::Div>::new();
    let viewer: StoredValue<Option<js::CodeViewer>, LocalStorage> = StoredValue::new_local(None);
    Effect::new(move |_| {
        let text = text();
        let Some(el) = node.get() else { return };
        if viewer.with_value(|v| v.is_none()) {
            viewer.set_value(Some(js::CodeViewer::new(&el, "python")));
        }
        viewer.with_value(|v| {
            if let (Some(v), Some(text)) = (v, text) {
                v.set_text(&text);
            }
        });
    });
    node
}

/// The PyTorch pane, for the last successful compile: the Python snippet that calls it with the
/// `hopfuse` package (Copy, and Download of the program it reads), then its torch twin (Copy
/// and Download).
#[component]
pub fn TorchPane(
    compiled: RwSignal<Option<Arc<Compiled>>>,
    /// The sizes entered for Run (the snippet's tensors have them).
    sizes: Signal<BTreeMap<String, i64>>,
    /// The program has errors: the twin shown is the last successful compile's.
    stale: Signal<bool>,
    /// Copies text to the clipboard and says so (the page's toast).
    copy: Callback<String>,
) -> impl IntoView {
    let twin = move || compiled.with(|c| c.as_ref().map(|c| c.torch.clone()));
    let python = move || {
        compiled.with(|c| {
            c.as_ref().map(|c| {
                let sizes = sizes.with(|s| crate::model::plan_sizes(&c.plan, s));
                crate::python_snippet::snippet(&c.python, &sizes)
            })
        })
    };
    let source_ref = python_viewer(twin);
    let snippet_ref = python_viewer(python);
    view! {
        <div class="pane-tools">
            <span class="stale" class:hidden=move || !stale.get()>
                "last successful compile (the program has errors)"
            </span>
            <span class="note">"call it from PyTorch with the hopfuse package (pip install ./python), at Run's sizes"</span>
            <span class="spacer"></span>
            <button id="copy-python" on:click=move |_| {
                if let Some(t) = python() {
                    copy.run(t);
                }
            }>"Copy"</button>
            <button id="download-program" title="The program the snippet reads" on:click=move |_| {
                compiled.with_untracked(|c| {
                    if let Some(c) = c {
                        js::download(&c.python.file_name, &c.python.source, "text/plain");
                    }
                });
            }>"Download .hf"</button>
        </div>
        <div class="viewer snippet" id="python-snippet" node_ref=snippet_ref></div>
        <div class="pane-tools">
            <span class="note">"the same fusion as a PyTorch function: same dtypes, casts, reductions and accumulation"</span>
            <span class="spacer"></span>
            <button id="copy-torch" on:click=move |_| {
                if let Some(t) = twin() {
                    copy.run(t);
                }
            }>"Copy"</button>
            <button id="download-torch" on:click=move |_| {
                if let Some(t) = twin() {
                    js::download("twin.py", &t, "text/x-python");
                }
            }>"Download .py"</button>
        </div>
        <div class="viewer" id="torch-source" node_ref=source_ref></div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hopfuse_api::run::PeersReport;

    /// runner/tests/api_fixtures.rs writes it from the runner's own types.
    const PEERS: &str = include_str!("../tests/fixtures/done-peers.json");

    #[test]
    fn the_runners_peers_are_read() {
        let run = crate::runner::parse_result(PEERS);
        let p = run.measured.unwrap().peers.unwrap();
        assert_eq!(p.headline(), "x1.30 vs torch.compile");
        assert_eq!(
            p.spread_text().as_deref(),
            Some("x1.25 – x1.34 over 5 rounds")
        );
        assert_eq!(p.torch.as_deref(), Some("2.11.0+cu130"));
        let names: Vec<&str> = p.peers.iter().map(|q| q.name.as_str()).collect();
        assert_eq!(names, ["eager", "torch.compile"]);
        let compiled = &p.peers[1];
        assert!(compiled.passed && compiled.compile_s == Some(14.5));
        assert_eq!(compiled.median_us, Some(3.25));
        let html = peers_html(&p, true);
        assert!(
            html.contains("<span class=\"value\">x1.30 vs torch.compile</span>"),
            "{html}"
        );
        assert!(
            html.contains("id=\"vs-torch-spread\">x1.25 – x1.34 over 5 rounds<"),
            "{html}"
        );
        assert!(html.contains("compiled in 14.5 s (not timed)"), "{html}");
        // B's result of an A/B job has no ids.
        assert!(!peers_html(&p, false).contains(" id="));
    }

    /// The peers of a `result.peers` JSON object.
    fn parse(v: serde_json::Value) -> PeersView {
        let report: PeersReport =
            crate::runner::read_json(&v.to_string()).expect("the playground reads it");
        PeersView::from(&report)
    }

    #[test]
    fn unavailable_and_unvalidated_peers_say_so() {
        let p = parse(
            serde_json::json!({"unavailable": "cannot import torch: No module named 'torch'"}),
        );
        assert_eq!(
            p.headline(),
            "peers unavailable: cannot import torch: No module named 'torch'"
        );
        assert_eq!(p.spread_text(), None);
        let p = parse(serde_json::json!({"torch": "2.11", "rounds": 5, "peers": [
            {"name": "eager", "passed": false}
        ]}));
        assert_eq!(p.headline(), "no peer validated");
        assert!(!p.peers[0].passed);
        let p = parse(serde_json::json!({"peers": [
            {"name": "eager", "passed": false, "error": "<Triton> & co"}
        ]}));
        let html = peers_html(&p, true);
        assert!(
            html.contains("not timed: &lt;Triton&gt; &amp; co"),
            "{html}"
        );
        assert!(serde_json::from_value::<PeersReport>(serde_json::Value::Null).is_err());
    }
}
