//! The page: header (examples, sizes, Run, Tune, Share, settings, theme, reference, help), the editor
//! with its A/B tabs and the Problems list, the output panes ([`PANES`]: CUDA, Passes, Launch
//! plan, Pipeline, PyTorch, Run, PTX, SASS) and the status bar. A pane is a `Pane` variant, a
//! row of [`PANES`] and an arm of `panes::pane_body`. The panes follow the tab shown; with a
//! tab B, Run compares A and B. With `?embed=PANE` in the URL the page is the read-only embed
//! view (`embed`): the program and that one pane, for blog posts and docs.
//!
//! The state is in the address bar (a full link) and in localStorage (the bare URL reopens the
//! last program); closing the page with edits not shared since they were loaded asks first.
//!
//! This module holds the page's state ([`Ui`]: every signal, one copyable handle) and its kinds;
//! what the page does with it is one module per concern:
//! - `state`: the programs of tabs A and B, compiling in the page, toasts and the clipboard;
//! - `links`: the state in the address bar and localStorage, links, short links, examples;
//! - `run`: the runner's health and a run (or an A/B run) followed through its events;
//! - `playground`: the page's layout (header, editor, panes, status bar) and its shortcuts;
//! - `editor`: what surrounds the editor (tabs A and B, size boxes, Problems, the splitter);
//! - `panes`: the output panes but Run (CUDA, Passes, Launch plan, Pipeline, PyTorch, PTX/SASS);
//! - `run_pane`: the Run pane and a job's result (measured, fake, failed, A/B);
//! - `tune`: Tune (the runner's tuner), its job followed and cancelled, and the Tune section
//!   of the Run pane with "use this schedule";
//! - `dialogs`: Help, Settings, Share and the language reference;
//! - `embed`: the read-only embed view.

mod auto_line;
mod dialogs;
mod editor;
mod embed;
mod links;
mod panes;
mod playground;
mod run;
mod run_pane;
mod state;
mod tune;

use crate::js;
use crate::model::{Compiled, Diag};
use crate::runner::{RunView, Settings};
use crate::share::{Pane, PassMode, Tab};
use embed::Embed;
use leptos::prelude::*;
use playground::Playground;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The longest wait after an edit before the program is compiled again; the editor compiles at
/// once while compiles are fast and waits only for slow programs (js/editor.js).
const MAX_COMPILE_DELAY_MS: u32 = 150;
/// localStorage: the fragment of the last state (the bare URL restores it).
const LAST_STATE_KEY: &str = "hopfuse.last";
/// localStorage: whether the CUDA and IR viewers wrap long lines.
const WRAP_KEY: &str = "hopfuse.wrap";
use crate::model::DEFAULT_SIZE;

#[derive(Clone, Debug, PartialEq)]
pub enum RunState {
    Idle,
    /// Sent, or streaming: the last event's name and every stage seen so far.
    Active {
        stage: String,
        job: Option<String>,
        seen: Vec<String>,
    },
    Done(Arc<RunView>),
    Failed(String),
}

/// A tune job (`POST /api/tune`) as the Tune section shows it; each state but `Idle` and
/// `Failed` remembers the tab whose program was tuned ("use this schedule" edits that one).
#[derive(Clone, Debug, PartialEq)]
pub enum TuneState {
    Idle,
    /// Sent, or streaming: the candidates' steps so far.
    Active {
        job: Option<String>,
        steps: Vec<hopfuse_api::tune::TuneProgress>,
        tab: Tab,
    },
    Done(Arc<crate::runner::TuneView>, Tab),
    Failed(String),
}

#[derive(Clone, Debug, PartialEq)]
pub enum RunnerStatus {
    Checking,
    /// Runs execute on a GPU.
    Up(String),
    /// The fake worker: runs are compiled and checked, never measured.
    Fake(String),
    /// Reachable, but runs are unavailable (no usable GPU): the reason.
    NoGpu(String),
    Down(String),
}

impl RunnerStatus {
    /// Why Run is off, in plain words (None: Run is available).
    fn run_blocked(&self) -> Option<&'static str> {
        match self {
            RunnerStatus::NoGpu(_) => Some(
                "Run is off: the runner has no usable GPU, so it cannot run programs. \
                 Compiling works in the page as usual.",
            ),
            RunnerStatus::Down(_) => Some(
                "Run is off: no runner is reachable. Compiling works in the page as usual; \
                 set a runner in Settings to run on a GPU.",
            ),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialog {
    Help,
    Settings,
    Share,
    Reference,
}

/// The short link of the Share dialog.
#[derive(Clone, Debug, PartialEq)]
pub enum ShortLink {
    None,
    Making,
    Made(String),
    Failed(String),
}

/// The output panes in tab order (Alt+1 ... follow it): the pane, its tab's label, and whether
/// the embed view can show it. A new pane is a variant of [`Pane`], a row here and an arm in
/// [`panes::pane_body`].
pub const PANES: &[(Pane, &str, bool)] = &[
    (Pane::Cuda, "CUDA", true),
    (Pane::Passes, "Passes", true),
    (Pane::Plan, "Launch plan", true),
    (Pane::Pipeline, "Pipeline", true),
    (Pane::Torch, "PyTorch", true),
    (Pane::Run, "Run", false),
    (Pane::Ptx, "PTX", false),
    (Pane::Sass, "SASS", false),
];

/// The pane's name in URLs (`?embed=cuda`) and element ids.
pub fn pane_key(pane: Pane) -> String {
    format!("{pane:?}").to_ascii_lowercase()
}

/// Every signal of the page, as one copyable handle.
#[derive(Clone, Copy)]
pub struct Ui {
    /// Program A (tab A).
    program: RwSignal<String>,
    /// Program B (tab B), when there is a tab B.
    program_b: RwSignal<Option<String>>,
    /// The tab in the editor; the compilation and the panes are its program's.
    tab: RwSignal<Tab>,
    sizes: RwSignal<BTreeMap<String, i64>>,
    /// Size boxes holding something that is not a size: the text and why it is refused.
    size_errors: RwSignal<BTreeMap<String, (String, String)>>,
    /// Values typed into the scalar-input fields, by name (Run sends those the program has).
    scalars: RwSignal<BTreeMap<String, f64>>,
    pane: RwSignal<Pane>,
    pass: RwSignal<Option<String>>,
    pass_mode: RwSignal<PassMode>,
    iters: RwSignal<u32>,
    seed: RwSignal<u64>,
    compiled: RwSignal<Option<Arc<Compiled>>>,
    diags: RwSignal<Vec<Diag>>,
    lower_ms: RwSignal<Option<f64>>,
    settings: RwSignal<Settings>,
    runner: RwSignal<RunnerStatus>,
    run: RwSignal<RunState>,
    tune: RwSignal<TuneState>,
    dialog: RwSignal<Option<Dialog>>,
    toast: RwSignal<Option<(u32, String)>>,
    dark: RwSignal<bool>,
    /// The CUDA and IR viewers (and the diff) wrap long lines.
    wrap: RwSignal<bool>,
    short: RwSignal<ShortLink>,
    /// The pane the Share dialog's embed snippet shows.
    embed_pane: RwSignal<Pane>,
    split: RwSignal<f64>,
    /// The state may be written to the URL (false while a short link loads).
    ready: RwSignal<bool>,
    editor: StoredValue<Option<js::FusionEditor>, LocalStorage>,
    /// The events of the job being followed.
    stream: StoredValue<Option<js::EventStream>, LocalStorage>,
    /// The events of the tune job being followed.
    tune_stream: StoredValue<Option<js::EventStream>, LocalStorage>,
    /// The fragment this page wrote last (a hashchange to anything else is a new link).
    written: RwSignal<String>,
    /// Programs A and B as last loaded or shared: other text is an unshared edit.
    baseline: StoredValue<(String, Option<String>)>,
    /// The read-only embed view: nothing is written to the URL or to localStorage.
    embedded: bool,
}

fn now_ms() -> Option<f64> {
    window().performance().map(|p| p.now())
}

#[component]
pub fn App() -> impl IntoView {
    let search = window().location().search().unwrap_or_default();
    let embed = search
        .trim_start_matches('?')
        .split('&')
        .find_map(|kv| kv.strip_prefix("embed="))
        .map(|key| {
            PANES
                .iter()
                .find(|(p, _, embeddable)| *embeddable && pane_key(*p) == key)
                .map_or(Pane::Cuda, |(p, _, _)| *p)
        });
    let ui = Ui::new(embed.is_some());
    ui.restore(&window().location().hash().unwrap_or_default());
    let dark = ui.dark;
    Effect::new(move |_| {
        let dark = dark.get();
        if let Some(root) = document().document_element() {
            let _ = root.class_list().toggle_with_force("dark", dark);
        }
    });
    match embed {
        Some(pane) => view! { <Embed ui=ui pane=pane /> }.into_any(),
        None => view! { <Playground ui=ui /> }.into_any(),
    }
}
