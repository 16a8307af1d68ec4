//! The page: header (examples, sizes, Run, Share, settings, theme, reference, help), the editor
//! with its A/B tabs and the Problems list, the output panes ([`PANES`]: CUDA, Passes, Launch
//! plan, Pipeline, Run) and the status bar. The panes follow the tab shown; with a tab B, Run
//! compares A and B. With `?embed=PANE` in the URL the page is the read-only embed view
//! ([`Embed`]): the program and that one pane, for blog posts and docs.
//!
//! The state is in the address bar (a full link) and in localStorage (the bare URL reopens the
//! last program); closing the page with edits not shared since they were loaded asks first.

use crate::diff;
use crate::examples;
use crate::inspect_panes::{self, Asm, InspectPane};
use crate::js;
use crate::model::{self, Compiled, Diag};
use crate::pipeline;
use crate::reference;
use crate::runner::{self, ApiError, RunView, Settings};
use crate::share::{self, Pane, PassMode, State, Tab};
use leptos::ev;
use leptos::html;
use leptos::prelude::*;
use leptos::task::spawn_local;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use wasm_bindgen::prelude::*;

/// The longest wait after an edit before the program is compiled again; the editor compiles at
/// once while compiles are fast and waits only for slow programs (js/editor.js).
const MAX_COMPILE_DELAY_MS: u32 = 150;
/// localStorage: the fragment of the last state (the bare URL restores it).
const LAST_STATE_KEY: &str = "hopfuse.last";
/// localStorage: whether the CUDA and IR viewers wrap long lines.
const WRAP_KEY: &str = "hopfuse.wrap";
/// Size given to a symbol the first time it appears.
const DEFAULT_SIZE: i64 = 4096;

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
/// [`pane_body`].
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
    /// The fragment this page wrote last (a hashchange to anything else is a new link).
    written: StoredValue<String>,
    /// Programs A and B as last loaded or shared: other text is an unshared edit.
    baseline: StoredValue<(String, Option<String>)>,
    /// The read-only embed view: nothing is written to the URL or to localStorage.
    embedded: bool,
}

fn now_ms() -> Option<f64> {
    window().performance().map(|p| p.now())
}

impl Ui {
    fn new(embedded: bool) -> Ui {
        let dark = match crate::storage_get("hopfuse.theme").as_deref() {
            Some("dark") => true,
            Some("light") => false,
            _ => window()
                .match_media("(prefers-color-scheme: dark)")
                .ok()
                .flatten()
                .is_some_and(|m| m.matches()),
        };
        Ui {
            program: RwSignal::new(String::new()),
            program_b: RwSignal::new(None),
            tab: RwSignal::new(Tab::A),
            sizes: RwSignal::new(BTreeMap::new()),
            size_errors: RwSignal::new(BTreeMap::new()),
            pane: RwSignal::new(Pane::Cuda),
            pass: RwSignal::new(None),
            pass_mode: RwSignal::new(PassMode::Ir),
            iters: RwSignal::new(share::default_iters()),
            seed: RwSignal::new(0),
            compiled: RwSignal::new(None),
            diags: RwSignal::new(Vec::new()),
            lower_ms: RwSignal::new(None),
            settings: RwSignal::new(Settings::load()),
            runner: RwSignal::new(RunnerStatus::Checking),
            run: RwSignal::new(RunState::Idle),
            dialog: RwSignal::new(None),
            toast: RwSignal::new(None),
            dark: RwSignal::new(dark),
            wrap: RwSignal::new(crate::storage_get(WRAP_KEY).as_deref() == Some("on")),
            short: RwSignal::new(ShortLink::None),
            embed_pane: RwSignal::new(Pane::Cuda),
            split: RwSignal::new(44.0),
            ready: RwSignal::new(false),
            editor: StoredValue::new_local(None),
            stream: StoredValue::new_local(None),
            written: StoredValue::new(String::new()),
            baseline: StoredValue::new((String::new(), None)),
            embedded,
        }
    }

    /// The programs as they are now count as shared (loaded from a link, copied, short-linked).
    fn mark_shared(self) {
        self.baseline
            .set_value((self.program.get_untracked(), self.program_b.get_untracked()));
    }

    /// Whether the programs changed since they were last loaded or shared.
    fn unshared_edits(self) -> bool {
        self.sync();
        let now = (self.program.get_untracked(), self.program_b.get_untracked());
        self.baseline.with_value(|b| *b != now)
    }

    /// Compiles `text` in the page and updates every pane.
    fn compile(self, text: String) {
        let t0 = now_ms();
        let result = model::compile(&text);
        let ms = t0.zip(now_ms()).map(|(a, b)| b - a);
        match result {
            Ok(c) => {
                let missing = self
                    .sizes
                    .with_untracked(|s| c.plan.symbols.iter().any(|sym| !s.contains_key(sym)));
                if missing {
                    self.sizes.update(|s| {
                        for sym in &c.plan.symbols {
                            s.entry(sym.clone()).or_insert(DEFAULT_SIZE);
                        }
                    });
                }
                self.compiled.set(Some(Arc::new(c)));
                self.diags.set(Vec::new());
            }
            Err(d) => self.diags.set(d),
        }
        self.lower_ms.set(ms);
        if self.tab.get_untracked() == Tab::B && self.program_b.with_untracked(Option::is_some) {
            self.program_b.set(Some(text));
        } else {
            self.program.set(text);
        }
        self.push_diagnostics();
    }

    /// The program of `tab` (A's when there is no B).
    fn text_of(self, tab: Tab) -> String {
        match tab {
            Tab::B => self
                .program_b
                .get_untracked()
                .unwrap_or_else(|| self.program.get_untracked()),
            Tab::A => self.program.get_untracked(),
        }
    }

    /// The program of the tab shown, tracked.
    fn shown_text(self) -> String {
        match self.tab.get() {
            Tab::B => self.program_b.get().unwrap_or_else(|| self.program.get()),
            Tab::A => self.program.get(),
        }
    }

    /// Shows `tab` in the editor and compiles its program (the panes follow).
    fn show(self, tab: Tab) {
        self.tab.set(tab);
        let text = self.text_of(tab);
        self.editor.with_value(|e| {
            if let Some(e) = e {
                e.switch_to(tab.key(), &text);
                if e.text() != text {
                    e.set_text(&text);
                }
            }
        });
        self.compile(text);
    }

    /// Switches to `tab`, keeping an edit of the tab shown that still waits for the debounce.
    fn select_tab(self, tab: Tab) {
        if tab == self.tab.get_untracked()
            || (tab == Tab::B && self.program_b.with_untracked(Option::is_none))
        {
            return;
        }
        self.sync();
        self.show(tab);
    }

    /// Opens tab B with a copy of A's program.
    fn open_b(self) {
        self.sync();
        if self.program_b.with_untracked(Option::is_none) {
            self.program_b.set(Some(self.program.get_untracked()));
        }
        self.show(Tab::B);
    }

    /// Closes tab B (its program is dropped) and shows A.
    fn close_b(self) {
        if self.tab.get_untracked() == Tab::B {
            self.show(Tab::A);
        }
        self.program_b.set(None);
        self.editor.with_value(|e| {
            if let Some(e) = e {
                e.forget(Tab::B.key());
            }
        });
    }

    fn push_diagnostics(self) {
        let json = self
            .diags
            .with_untracked(|d| serde_json::to_string(d).unwrap_or_else(|_| "[]".into()));
        self.editor.with_value(|e| {
            if let Some(e) = e {
                e.set_diagnostics(&json);
            }
        });
    }

    /// Replaces the program (an example, a link) and compiles it now.
    fn set_program(self, text: &str) {
        self.editor.with_value(|e| {
            if let Some(e) = e {
                e.set_text(text);
            }
        });
        self.compile(text.to_string());
    }

    fn state(self) -> State {
        State {
            program: self.program.get_untracked(),
            sizes: self.sizes.get_untracked(),
            pane: self.pane.get_untracked(),
            pass: self.pass.get_untracked(),
            pass_mode: self.pass_mode.get_untracked(),
            iters: self.iters.get_untracked(),
            seed: self.seed.get_untracked(),
            program_b: self.program_b.get_untracked(),
            tab: self.tab.get_untracked(),
        }
    }

    fn apply(self, s: State) {
        self.sizes.set(s.sizes);
        self.pane.set(s.pane);
        self.pass.set(s.pass);
        self.pass_mode.set(s.pass_mode);
        self.iters.set(s.iters.max(1));
        self.seed.set(s.seed);
        let tab = if s.program_b.is_some() { s.tab } else { Tab::A };
        self.program.set(s.program);
        self.program_b.set(s.program_b);
        self.show(tab);
    }

    /// Loads an example with the sizes of its `// bench:` line: the first one at once, any
    /// other once its text has come from `examples/` next to the page.
    fn load_example(self, e: examples::Example) {
        let show = move |text: &str| {
            self.pass.set(None);
            self.run.set(RunState::Idle);
            let bench = examples::bench_sizes(&e);
            self.sizes.update(|s| s.extend(bench));
            self.size_errors.set(BTreeMap::new());
            self.set_program(text);
            self.mark_shared();
        };
        if let Some(text) = examples::built_in(&e) {
            show(text);
            return;
        }
        let url = examples::url(&e);
        spawn_local(async move {
            let answer = crate::js::api_request("GET", &url, "", None, 10_000).await;
            let get = |a: &wasm_bindgen::JsValue, k: &str| {
                js_sys::Reflect::get(a, &wasm_bindgen::JsValue::from_str(k)).ok()
            };
            match answer {
                Ok(a) if get(&a, "status").and_then(|v| v.as_f64()) == Some(200.0) => show(
                    &get(&a, "body")
                        .and_then(|v| v.as_string())
                        .unwrap_or_default(),
                ),
                _ => self.say(format!(
                    "The example {url} could not be loaded from this server."
                )),
            }
        });
    }

    /// Restores the state a fragment names (`#v1:...` or a short link `#s:ID`); with none, the
    /// state this browser had last, else the first example.
    fn restore(self, hash: &str) {
        if hash.len() <= 1 && !self.embedded {
            if let Some(Ok(s)) = crate::storage_get(LAST_STATE_KEY).map(|f| share::decode(&f)) {
                self.apply(s);
                self.mark_shared();
                self.ready.set(true);
                self.say("Your last program is back (kept in this browser).");
                return;
            }
        }
        if let Some(id) = hash.strip_prefix("#s:") {
            let id = id.to_string();
            self.ready.set(false);
            let settings = self.settings.get_untracked();
            spawn_local(async move {
                match runner::get_link(&settings, &id).await {
                    Ok(s) => {
                        self.apply(s);
                        self.mark_shared();
                    }
                    Err(e) => self.say(format!(
                        "Short link {id} could not be opened. {}",
                        e.describe(&settings)
                    )),
                }
                if self.program.get_untracked().is_empty() {
                    self.load_example(examples::ALL[0]);
                }
                self.ready.set(true);
            });
            return;
        }
        if hash.len() > 1 {
            match share::decode(hash) {
                Ok(s) => {
                    self.apply(s);
                    self.mark_shared();
                    self.ready.set(true);
                    return;
                }
                Err(e) => self.say(e),
            }
        }
        self.load_example(examples::ALL[0]);
        self.ready.set(true);
    }

    /// Writes the state into the address bar (so the page URL is always a full link) and into
    /// localStorage (so the bare URL reopens it).
    fn write_fragment(self) {
        if self.embedded {
            return;
        }
        let fragment = format!("#{}", share::encode(&self.state()));
        if self.written.with_value(|w| *w == fragment) {
            return;
        }
        if let Ok(h) = window().history() {
            let _ = h.replace_state_with_url(&JsValue::NULL, "", Some(&fragment));
        }
        crate::storage_set(LAST_STATE_KEY, &fragment);
        self.written.set_value(fragment);
    }

    /// The page's address without query and fragment.
    fn page_url(self) -> String {
        let loc = window().location();
        format!(
            "{}{}",
            loc.origin().unwrap_or_default(),
            loc.pathname().unwrap_or_default()
        )
    }

    /// The full link: the page with the whole state in the fragment.
    fn full_link(self) -> String {
        format!("{}#{}", self.page_url(), share::encode(&self.state()))
    }

    /// The read-only embed view of the current state, showing `pane`.
    fn embed_link(self, pane: Pane) -> String {
        format!(
            "{}?embed={}#{}",
            self.page_url(),
            pane_key(pane),
            share::encode(&self.state())
        )
    }

    /// A short message at the bottom of the page for a few seconds.
    fn say(self, msg: impl Into<String>) {
        let n = self.toast.with_untracked(|t| t.as_ref().map_or(0, |t| t.0)) + 1;
        self.toast.set(Some((n, msg.into())));
        set_timeout(
            move || {
                if self
                    .toast
                    .with_untracked(|t| t.as_ref().is_some_and(|t| t.0 == n))
                {
                    self.toast.set(None);
                }
            },
            Duration::from_millis(6000),
        );
    }

    fn copy(self, text: String, what: &'static str) {
        spawn_local(async move {
            let ok = js::copy_text(&text).await.as_bool().unwrap_or(false);
            self.say(if ok {
                format!("{what} copied")
            } else {
                format!("Could not copy the {what} (no clipboard access)")
            });
        });
    }

    /// Compiles the editor's text now if an edit is still waiting for the debounce.
    fn sync(self) {
        let text = self.editor.with_value(|e| e.as_ref().map(|e| e.text()));
        if let Some(text) = text {
            if text != self.text_of(self.tab.get_untracked()) {
                self.compile(text);
            }
        }
    }

    /// Opens the Share dialog (full link, short link, embed snippet).
    fn share(self) {
        self.sync();
        self.write_fragment();
        self.short.set(ShortLink::None);
        if self.pane.get_untracked() != Pane::Run {
            self.embed_pane.set(self.pane.get_untracked());
        }
        self.dialog.set(Some(Dialog::Share));
    }

    /// Copies `text` as the shared state (no unshared edits after it).
    fn copy_shared(self, text: String, what: &'static str) {
        self.mark_shared();
        self.copy(text, what);
    }

    /// Opens the Share dialog and makes a short link there (`POST /api/links`), copied at once.
    fn short_link(self) {
        self.share();
        let state = self.state();
        let settings = self.settings.get_untracked();
        self.short.set(ShortLink::Making);
        spawn_local(async move {
            match runner::create_link(&settings, &state).await {
                Ok(id) => {
                    let url = format!("{}#s:{id}", self.page_url());
                    self.short.set(ShortLink::Made(url.clone()));
                    self.mark_shared();
                    let ok = js::copy_text(&url).await.as_bool().unwrap_or(false);
                    self.say(if ok {
                        format!("Short link copied: {url}")
                    } else {
                        format!("Short link: {url}")
                    });
                }
                Err(e) => {
                    self.note_unreachable(&e, &settings);
                    self.short.set(ShortLink::Failed(format!(
                        "No short link: {} The full link above holds the whole state without a runner.",
                        e.describe(&settings)
                    )));
                }
            }
        });
    }

    /// Stops following the current job (it may still run on the runner).
    fn stop_waiting(self) {
        if let RunState::Active { job, .. } = self.run.get_untracked() {
            self.run.set(RunState::Failed(match job {
                Some(j) => format!("Stopped waiting for job {j}; it may still run on the runner."),
                None => "Stopped waiting for the runner.".to_string(),
            }));
        }
        self.stream.with_value(|s| {
            if let Some(s) = s {
                s.cancel();
            }
        });
    }

    fn note_unreachable(self, e: &ApiError, settings: &Settings) {
        if let ApiError::Unreachable(_) = e {
            self.runner.set(RunnerStatus::Down(e.describe(settings)));
        }
    }

    fn check_runner(self) {
        let settings = self.settings.get_untracked();
        self.runner.set(RunnerStatus::Checking);
        spawn_local(async move {
            self.runner.set(match runner::health(&settings).await {
                Ok((desc, runner::RunMode::Gpu)) => RunnerStatus::Up(desc),
                Ok((desc, runner::RunMode::Fake)) => RunnerStatus::Fake(desc),
                Ok((desc, runner::RunMode::Unavailable)) => RunnerStatus::NoGpu(desc),
                Err(e) => RunnerStatus::Down(e.describe(&settings)),
            });
        });
    }

    /// Sends the program (with a tab B: programs A and B, an A/B comparison) to the runner and
    /// follows the job's events.
    fn run(self) {
        if matches!(self.run.get_untracked(), RunState::Active { .. }) {
            return;
        }
        if let Some(why) = self.runner.with_untracked(|r| r.run_blocked()) {
            self.say(why);
            return;
        }
        self.pane.set(Pane::Run);
        self.sync();
        if let Some((sym, (text, why))) = self
            .size_errors
            .with_untracked(|e| e.first_key_value().map(|(k, v)| (k.clone(), v.clone())))
        {
            self.run.set(RunState::Failed(format!(
                "The size {sym}={text} is not valid ({why}); fix it before running."
            )));
            return;
        }
        let shown = self.tab.get_untracked();
        let program_b = self.program_b.get_untracked();
        let name = |t: Tab| match (&program_b, t) {
            (None, _) => "The program",
            (Some(_), Tab::A) => "Program A",
            (Some(_), Tab::B) => "Program B",
        };
        let refuse = |who: &str, d: &Diag| {
            self.run.set(RunState::Failed(format!(
                "{who} does not compile ({}); fix it before running.",
                d.located()
            )));
        };
        if let Some(d) = self.diags.with_untracked(|d| d.first().cloned()) {
            refuse(name(shown), &d);
            return;
        }
        let Some(c) = self.compiled.get_untracked() else {
            return;
        };
        // The sizes of every symbol of both programs: the tab not shown is compiled here.
        let mut symbols = c.plan.symbols.clone();
        if program_b.is_some() {
            let other = match shown {
                Tab::A => Tab::B,
                Tab::B => Tab::A,
            };
            match model::compile(&self.text_of(other)) {
                Ok(o) => symbols.extend(o.plan.symbols.iter().cloned()),
                Err(d) => {
                    refuse(name(other), &d[0]);
                    return;
                }
            }
        }
        let sizes: BTreeMap<String, i64> = self.sizes.with_untracked(|s| {
            symbols
                .iter()
                .map(|k| (k.clone(), s.get(k).copied().unwrap_or(DEFAULT_SIZE)))
                .collect()
        });
        let (iters, seed) = (self.iters.get_untracked(), self.seed.get_untracked());
        let mut body = runner::run_body(
            &self.program.get_untracked(),
            program_b.as_deref(),
            &sizes,
            iters,
            seed,
        );
        crate::torch_pane::add_to_request(&mut body);
        crate::profile_view::add_to_request(&mut body);
        let settings = self.settings.get_untracked();
        self.run.set(RunState::Active {
            stage: "sending".into(),
            job: None,
            seen: Vec::new(),
        });
        let run = self.run;
        spawn_local(async move {
            let job = match runner::start_run(&settings, &body).await {
                Ok(job) => job,
                Err(e) => {
                    self.note_unreachable(&e, &settings);
                    run.set(RunState::Failed(e.describe(&settings)));
                    return;
                }
            };
            run.set(RunState::Active {
                stage: "queued".into(),
                job: Some(job.clone()),
                seen: Vec::new(),
            });
            let job2 = job.clone();
            // The events (docs/api.md): queued, compiling, running, validating, then done with
            // the result.
            let on_event =
                Closure::<dyn FnMut(String, String)>::new(move |name: String, data: String| {
                    let RunState::Active { mut seen, .. } = run.get_untracked() else {
                        return;
                    };
                    if seen.last() != Some(&name) {
                        seen.push(name.clone());
                    }
                    match name.as_str() {
                        "done" => {
                            let mut v = runner::parse_result(&data);
                            v.stages = seen;
                            run.set(RunState::Done(Arc::new(v)));
                        }
                        "queued" | "compiling" | "running" | "validating" => {
                            run.set(RunState::Active {
                                stage: name,
                                job: Some(job2.clone()),
                                seen,
                            })
                        }
                        // "error": an event the service could not serialize.
                        _ => run.set(RunState::Failed(format!(
                            "Job {job2}: unexpected event `{name}` from the runner: {data}"
                        ))),
                    }
                })
                .into_js_value();
            let stream = js::EventStream::new(
                &runner::events_url(&settings, &job),
                settings.token.trim(),
                &on_event,
            );
            let done = stream.done();
            self.stream.set_value(Some(stream));
            let ended = wasm_bindgen_futures::JsFuture::from(done).await;
            self.stream.set_value(None);
            if matches!(run.get_untracked(), RunState::Active { .. }) {
                run.set(RunState::Failed(match ended {
                    Err(e) => format!(
                        "Job {job}: the event stream failed: {}",
                        e.as_string().unwrap_or_else(|| format!("{e:?}"))
                    ),
                    Ok(_) => format!("Job {job}: the event stream ended without a result."),
                }));
            }
        });
    }
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

/// The whole playground.
#[component]
fn Playground(ui: Ui) -> impl IntoView {
    let editor_ref = NodeRef::<html::Div>::new();
    let main_ref = NodeRef::<html::Main>::new();
    ui.check_runner();

    // The editor, once its element exists.
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
            &reference::json(),
        );
        if ui.tab.get_untracked() == Tab::B {
            ed.switch_to(Tab::B.key(), &ui.text_of(Tab::B));
        }
        ed.focus();
        ui.editor.set_value(Some(ed));
        ui.push_diagnostics();
    });
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

    let _ = window_event_listener(ev::hashchange, move |_| {
        let hash = window().location().hash().unwrap_or_default();
        if ui.written.with_value(|w| *w != hash) {
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
        } else if e.key() == "F1" {
            e.prevent_default();
            ui.dialog.set(Some(Dialog::Help));
        }
    });

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

    let symbols = Memo::new(move |_| {
        ui.compiled.with(|c| {
            c.as_ref()
                .map(|c| c.plan.symbols.clone())
                .unwrap_or_default()
        })
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
                        let scroll = !matches!(pane, Pane::Cuda | Pane::Passes | Pane::Ptx | Pane::Sass);
                        view! {
                            <div
                                class="pane"
                                class:scroll=scroll
                                id=format!("pane-{}", pane_key(pane))
                                class:hidden=move || ui.pane.get() != pane
                            >
                                {pane_body(ui, pane, Some(inspector))}
                            </div>
                        }
                    })
                    .collect_view()}
            </section>
        </main>
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
        <div id="toast" class="toast" class:hidden=move || ui.toast.with(|t| t.is_none())>
            {move || ui.toast.get().map(|t| t.1).unwrap_or_default()}
        </div>
        {move || ui.dialog.get().map(|d| view! { <DialogView ui=ui dialog=d /> })}
    }
}

/// What a pane shows (the same in the playground and in the embed view).
/// `inspector` is the PTX/SASS panes' shared request state (the embed view has none: those panes
/// are not embeddable).
fn pane_body(ui: Ui, pane: Pane, inspector: Option<inspect_panes::Inspector>) -> AnyView {
    match pane {
        Pane::Ptx | Pane::Sass => match inspector {
            Some(inspector) => {
                let asm = if pane == Pane::Ptx { Asm::Ptx } else { Asm::Sass };
                view! { <InspectPane inspector=inspector asm=asm /> }.into_any()
            }
            None => view! { <p class="insp-need">"PTX and SASS need the playground and a runner service."</p> }.into_any(),
        },
        Pane::Cuda => view! { <CudaPane ui=ui /> }.into_any(),
        Pane::Passes => view! { <PassesPane ui=ui /> }.into_any(),
        Pane::Plan => view! { <PlanPane ui=ui /> }.into_any(),
        Pane::Pipeline => view! { <PipelinePane ui=ui /> }.into_any(),
        Pane::Run => view! { <RunPane ui=ui /> }.into_any(),
        Pane::Torch => view! {
            <crate::torch_pane::TorchPane
                compiled=ui.compiled
                stale=Signal::derive(move || ui.diags.with(|d| !d.is_empty()))
                copy=Callback::new(move |t| ui.copy(t, "PyTorch twin"))
            />
        }
        .into_any(),
    }
}

/// The read-only embed view (`?embed=PANE#v1:...`): the program and one pane, with a link to
/// open the same state in the playground.
#[component]
fn Embed(ui: Ui, pane: Pane) -> impl IntoView {
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
                <div class="pane" class:scroll=!matches!(pane, Pane::Cuda | Pane::Passes) id=format!("pane-{}", pane_key(pane))>
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

/// One size box: takes whole numbers ≥ 1; anything else stays in the box, marked, with the
/// reason (the plan keeps the last valid value meanwhile).
#[component]
fn SizeBox(ui: Ui, sym: String) -> impl IntoView {
    let (s1, s2, s3) = (sym.clone(), sym.clone(), sym.clone());
    let error = Memo::new(move |_| ui.size_errors.with(|e| e.get(&s1).cloned()));
    view! {
        <label class="size" class:invalid=move || error.with(Option::is_some)>
            {sym.clone()}
            "="
            <input
                type="text"
                inputmode="numeric"
                size="8"
                data-size=sym.clone()
                aria-invalid=move || error.with(Option::is_some).to_string()
                title=move || error.get().map(|(_, why)| why).unwrap_or_else(|| format!("the size {s3}"))
                prop:value=move || match error.get() {
                    Some((text, _)) => text,
                    None => ui.sizes.with(|s| s.get(&s2).copied().unwrap_or(DEFAULT_SIZE)).to_string(),
                }
                on:change=move |ev| {
                    let text = event_target_value(&ev);
                    match model::parse_size(&text) {
                        Ok(v) => {
                            ui.size_errors.update(|e| {
                                e.remove(&sym);
                            });
                            ui.sizes.update(|s| {
                                s.insert(sym.clone(), v);
                            });
                        }
                        Err(why) => ui.size_errors.update(|e| {
                            e.insert(sym.clone(), (text.trim().to_string(), why));
                        }),
                    }
                }
            />
            {move || error.get().map(|(_, why)| view! { <span class="size-error" role="alert">{why}</span> })}
        </label>
    }
}

/// Every diagnostic of the program shown, under the editor: click one to go there.
#[component]
fn Problems(ui: Ui) -> impl IntoView {
    view! {
        <div id="problems" class="problems" class:hidden=move || ui.diags.with(|d| d.is_empty())>
            <div class="problems-title">
                {move || ui.diags.with(|d| match d.len() {
                    1 => "Problems: 1".to_string(),
                    n => format!("Problems: {n}"),
                })}
            </div>
            <ol class="problem-list">
                {move || {
                    ui.diags
                        .get()
                        .into_iter()
                        .map(|d| {
                            let at = if d.line == 0 { "—".to_string() } else { format!("{}:{}", d.line, d.column) };
                            let from = d.from;
                            let has_place = d.line != 0;
                            view! {
                                <li>
                                    <button
                                        class="problem"
                                        disabled=!has_place
                                        on:click=move |_| ui.editor.with_value(|e| {
                                            if let Some(e) = e {
                                                e.goto(from as u32);
                                            }
                                        })
                                    >
                                        <span class="problem-at mono">{at}</span>
                                        <span class="problem-message">{d.message.clone()}</span>
                                    </button>
                                </li>
                            }
                        })
                        .collect_view()
                }}
            </ol>
        </div>
    }
}

/// The CUDA source: the kernel first (the helpers before it are folded), optional wrapping.
#[component]
fn CudaPane(ui: Ui) -> impl IntoView {
    let cuda_ref = NodeRef::<html::Div>::new();
    let viewer: StoredValue<Option<js::CodeViewer>, LocalStorage> = StoredValue::new_local(None);
    Effect::new(move |_| {
        let c = ui.compiled.get();
        let wrap = ui.wrap.get();
        let Some(el) = cuda_ref.get() else { return };
        if viewer.with_value(|v| v.is_none()) {
            viewer.set_value(Some(js::CodeViewer::new(&el, "cpp")));
        }
        viewer.with_value(|v| {
            if let Some(v) = v {
                v.set_wrap(wrap);
                if let Some(c) = c {
                    v.set_text(&c.cuda);
                }
            }
        });
    });
    view! {
        <div class="pane-tools">
            <span class="stale" class:hidden=move || ui.diags.with(|d| d.is_empty())>
                "last successful compile (the program has errors)"
            </span>
            <span class="spacer"></span>
            <WrapToggle ui=ui />
            <button
                id="copy-cuda"
                on:click=move |_| {
                    if let Some(c) = ui.compiled.get_untracked() {
                        ui.copy(c.cuda.clone(), "CUDA source");
                    }
                }
            >
                "Copy"
            </button>
            <button
                id="download-cuda"
                on:click=move |_| {
                    if let Some(c) = ui.compiled.get_untracked() {
                        js::download(&format!("{}.cu", c.plan.kernel_name), &c.cuda, "text/x-cuda");
                    }
                }
            >
                "Download .cu"
            </button>
        </div>
        <div class="viewer" id="cuda" node_ref=cuda_ref></div>
    }
}

/// Wrap long lines in the CUDA, IR and diff views (kept in this browser).
#[component]
fn WrapToggle(ui: Ui) -> impl IntoView {
    view! {
        <label class="wrap-toggle" title="Wrap long lines in the CUDA, IR and diff views">
            <input
                type="checkbox"
                class="wrap-lines"
                prop:checked=move || ui.wrap.get()
                on:change=move |ev| {
                    let on = event_target_checked(&ev);
                    ui.wrap.set(on);
                    crate::storage_set(WRAP_KEY, if on { "on" } else { "off" });
                }
            />
            " Wrap"
        </label>
    }
}

/// Tabs A and B above the editor: "+ B" opens B with a copy of A, × closes it.
#[component]
fn EditorTabs(ui: Ui) -> impl IntoView {
    let tab = move |t: Tab, label: &'static str| {
        view! {
            <button
                role="tab"
                class="etab"
                id=format!("edit-{}", t.key())
                class:active=move || ui.tab.get() == t
                aria-selected=move || (ui.tab.get() == t).to_string()
                title=format!("Program {label}")
                on:click=move |_| ui.select_tab(t)
            >
                {label}
            </button>
        }
    };
    view! {
        <nav class="etabs" role="tablist" aria-label="programs">
            {tab(Tab::A, "A")}
            {move || {
                if ui.program_b.with(Option::is_some) {
                    view! {
                        {tab(Tab::B, "B")}
                        <button id="close-b" class="link" title="Close B (its program is dropped)" aria-label="close B" on:click=move |_| ui.close_b()>
                            "×"
                        </button>
                        <span class="spacer"></span>
                        <span class="note ab-note">"Run compares A and B"</span>
                    }
                    .into_any()
                } else {
                    view! {
                        <button id="open-b" class="link" title="Open B with a copy of A, to compare them (A/B run)" on:click=move |_| ui.open_b()>
                            "+ B"
                        </button>
                    }
                    .into_any()
                }
            }}
        </nav>
    }
}

/// The bar between the editor and the panes: drag it (or use the arrow keys on it).
#[component]
fn Splitter(ui: Ui, main_ref: NodeRef<html::Main>) -> impl IntoView {
    let dragging = RwSignal::new(false);
    let set_from = move |x: f64| {
        if let Some(m) = main_ref.get_untracked() {
            let r = m.get_bounding_client_rect();
            if r.width() > 0.0 {
                ui.split
                    .set(((x - r.left()) / r.width() * 100.0).clamp(15.0, 85.0));
            }
        }
    };
    view! {
        <div
            class="splitter"
            role="separator"
            aria-orientation="vertical"
            aria-label="resize the editor and the panes"
            tabindex="0"
            class:dragging=move || dragging.get()
            on:pointerdown=move |e: ev::PointerEvent| {
                if let Some(t) = e.target() {
                    use wasm_bindgen::JsCast;
                    if let Ok(el) = t.dyn_into::<web_sys::Element>() {
                        let _ = el.set_pointer_capture(e.pointer_id());
                    }
                }
                dragging.set(true);
                e.prevent_default();
            }
            on:pointermove=move |e: ev::PointerEvent| {
                if dragging.get_untracked() {
                    set_from(e.client_x() as f64);
                }
            }
            on:pointerup=move |_| dragging.set(false)
            on:pointercancel=move |_| dragging.set(false)
            on:keydown=move |e: ev::KeyboardEvent| {
                let step = match e.key().as_str() {
                    "ArrowLeft" => -2.0,
                    "ArrowRight" => 2.0,
                    _ => return,
                };
                ui.split.update(|s| *s = (*s + step).clamp(15.0, 85.0));
            }
        ></div>
    }
}

#[component]
fn PaneTab(ui: Ui, pane: Pane, label: &'static str) -> impl IntoView {
    view! {
        <button
            role="tab"
            class="tab"
            id=format!("tab-{}", pane_key(pane))
            class:active=move || ui.pane.get() == pane
            aria-selected=move || (ui.pane.get() == pane).to_string()
            on:click=move |_| ui.pane.set(pane)
        >
            {label}
        </button>
    }
}

#[component]
fn PassesPane(ui: Ui) -> impl IntoView {
    let ir_ref = NodeRef::<html::Div>::new();
    let ir_viewer: StoredValue<Option<js::CodeViewer>, LocalStorage> = StoredValue::new_local(None);
    let selected = Memo::new(move |_| {
        let sel = ui.pass.get();
        ui.compiled.with(|c| {
            let c = c.as_ref()?;
            let i = sel
                .and_then(|name| c.passes.iter().position(|p| p.name == name))
                .unwrap_or(c.passes.len() - 1);
            Some(i)
        })
    });
    Effect::new(move |_| {
        let i = selected.get();
        let wrap = ui.wrap.get();
        let Some(el) = ir_ref.get() else { return };
        if ir_viewer.with_value(|v| v.is_none()) {
            ir_viewer.set_value(Some(js::CodeViewer::new(&el, "ir")));
        }
        let text = ui.compiled.with(|c| {
            c.as_ref()
                .zip(i)
                .map(|(c, i)| c.passes[i].ir.clone())
                .unwrap_or_default()
        });
        ir_viewer.with_value(|v| {
            if let Some(v) = v {
                v.set_wrap(wrap);
                v.set_text(&text);
            }
        });
    });
    let list = move || {
        ui.compiled.get().map(|c| {
            c.passes
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let name = p.name;
                    view! {
                        <li>
                            <button
                                class="pass"
                                data-pass=name
                                class:unchanged=!p.changed
                                class:selected=move || selected.get() == Some(i)
                                title=if p.changed {
                                    p.summary.to_string()
                                } else {
                                    format!("{} (changed nothing)", p.summary)
                                }
                                on:click=move |_| ui.pass.set(Some(name.to_string()))
                            >
                                <span class="pass-name">{name}</span>
                                <span class="pass-summary">{p.summary}</span>
                            </button>
                        </li>
                    }
                })
                .collect_view()
        })
    };
    let diff_view = move || {
        let c = ui.compiled.get()?;
        let i = selected.get()?;
        if i == 0 {
            return Some(
                view! { <p class="note">"The first dump: there is no pass before it."</p> }
                    .into_any(),
            );
        }
        let (old, new) = (&c.passes[i - 1].ir, &c.passes[i].ir);
        if old == new {
            return Some(
                view! { <p class="note">{format!("{} changed nothing.", c.passes[i].name)}</p> }
                    .into_any(),
            );
        }
        let lines = diff::hunks(&diff::lines(old, new), 3)
            .into_iter()
            .map(|row| {
                let (class, text) = match row {
                    diff::Row::Skipped(n) => ("d-skip", format!("⋯ {n} unchanged lines")),
                    diff::Row::Line(diff::Op::Same, l) => ("d-same", format!("  {l}")),
                    diff::Row::Line(diff::Op::Added, l) => ("d-add", format!("+ {l}")),
                    diff::Row::Line(diff::Op::Removed, l) => ("d-del", format!("- {l}")),
                };
                view! { <div class=class>{text}</div> }
            })
            .collect_view();
        Some(view! { <pre class="diff" class:wrap=move || ui.wrap.get()>{lines}</pre> }.into_any())
    };
    view! {
        <div class="passes">
            <ol class="pass-list">{list}</ol>
            <div class="pass-detail">
                <div class="pane-tools">
                    <span class="pass-title">
                        {move || {
                            ui.compiled
                                .get()
                                .zip(selected.get())
                                .map(|(c, i)| {
                                    let p = &c.passes[i];
                                    let prev = if i > 0 { c.passes[i - 1].name } else { "" };
                                    match ui.pass_mode.get() {
                                        PassMode::Ir => format!("IR after {}", p.name),
                                        PassMode::Diff if i > 0 => format!("{prev} → {}", p.name),
                                        PassMode::Diff => p.name.to_string(),
                                    }
                                })
                                .unwrap_or_default()
                        }}
                    </span>
                    <span class="spacer"></span>
                    <WrapToggle ui=ui />
                    <span class="toggle">
                        <button
                            id="pass-ir"
                            class:active=move || ui.pass_mode.get() == PassMode::Ir
                            on:click=move |_| ui.pass_mode.set(PassMode::Ir)
                        >
                            "IR"
                        </button>
                        <button
                            id="pass-diff"
                            class:active=move || ui.pass_mode.get() == PassMode::Diff
                            on:click=move |_| ui.pass_mode.set(PassMode::Diff)
                        >
                            "Diff vs previous"
                        </button>
                    </span>
                </div>
                <div class="viewer" id="pass-ir-view" node_ref=ir_ref class:hidden=move || ui.pass_mode.get() != PassMode::Ir></div>
                <div class="viewer scroll" id="pass-diff-view" class:hidden=move || ui.pass_mode.get() != PassMode::Diff>
                    {diff_view}
                </div>
            </div>
        </div>
    }
}

#[component]
fn PlanPane(ui: Ui) -> impl IntoView {
    move || {
        let Some(c) = ui.compiled.get() else {
            return view! { <p class="note">"No compilation yet."</p> }.into_any();
        };
        let sizes = ui.sizes.get();
        let p = &c.plan;
        let dims = |d: &[hopfuse::plan::SizeExpr; 3]| {
            d.iter()
                .map(|e| model::expr_row(e, &sizes))
                .collect::<Vec<_>>()
                .join("  ×  ")
        };
        let sizes_text = p
            .symbols
            .iter()
            .map(|s| format!("{s}={}", sizes.get(s).copied().unwrap_or(DEFAULT_SIZE)))
            .collect::<Vec<_>>()
            .join(", ");
        let params = p
            .params
            .iter()
            .map(|param| {
                let (kind, name, detail) = model::param_row(param);
                view! {
                    <tr>
                        <td>{kind}</td>
                        <td class="mono">{name}</td>
                        <td class="mono">{detail}</td>
                    </tr>
                }
            })
            .collect_view();
        // The compiler's constraints, then CUDA's launch limits on grid, block and shared memory.
        let all_constraints: Vec<_> = p
            .constraints
            .iter()
            .cloned()
            .chain(p.launch_limits())
            .collect();
        let launch_error = p.concretize(&sizes).err().map(|e| {
            view! { <p class="error" id="plan-error">{format!("These sizes cannot be launched: {e}.")}</p> }
        });
        let constraints = if all_constraints.is_empty() {
            view! { <p class="note">"None."</p> }.into_any()
        } else {
            view! {
                <ul class="constraints" id="plan-constraints">
                    {all_constraints
                        .iter()
                        .map(|k| {
                            let (text, ok) = model::constraint_row(k, &sizes);
                            let (class, mark) = match ok {
                                Some(true) => ("ok", "✓"),
                                Some(false) => ("bad", "✗"),
                                None => ("", "?"),
                            };
                            view! {
                                <li class=class>
                                    <span class="mark">{mark}</span>
                                    <span class="mono">{text}</span>
                                </li>
                            }
                        })
                        .collect_view()}
                </ul>
            }
            .into_any()
        };
        let bytes = p
            .min_global_bytes
            .eval(&sizes)
            .map(|b| format!("{} ({})", model::bytes(b as f64), p.min_global_bytes))
            .unwrap_or_else(|e| e.to_string());
        let tensor_maps = if p.tensor_maps.is_empty() {
            "none".to_string()
        } else {
            p.tensor_maps
                .iter()
                .map(|t| format!("{} ({}, box {:?})", t.param, t.tensor, t.box_dims))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let sharing = p
            .register_sharing
            .as_ref()
            .map(|r| {
                format!(
                    "producer {} / consumer {} registers",
                    r.producer, r.consumer
                )
            })
            .unwrap_or_else(|| "none (registers per thread come from a run)".to_string());
        view! {
            <div class="plan">
                <p class="note">{format!("Values with {sizes_text}.")}</p>
                <table class="kv">
                    <tr><th>"kernel"</th><td class="mono">{p.kernel_name.clone()}</td></tr>
                    <tr><th>"index type"</th><td class="mono">{p.index_type.cuda()}</td></tr>
                    <tr><th>"grid"</th><td class="mono" id="plan-grid">{dims(&p.grid)}</td></tr>
                    <tr><th>"block"</th><td class="mono" id="plan-block">{dims(&p.block)}</td></tr>
                    <tr><th>"dynamic shared memory"</th><td class="mono">{model::expr_row(&p.dynamic_smem_bytes, &sizes) + " bytes"}</td></tr>
                    <tr><th>"global traffic (minimum)"</th><td class="mono">{bytes}</td></tr>
                    <tr><th>"tensor maps"</th><td class="mono">{tensor_maps}</td></tr>
                    <tr><th>"register sharing"</th><td class="mono">{sharing}</td></tr>
                </table>
                <h3>"Parameters"</h3>
                <table class="params">
                    <tr><th>"kind"</th><th>"name"</th><th>"type"</th></tr>
                    {params}
                </table>
                <h3>"Constraints (checked with these sizes)"</h3>
                {launch_error}
                {constraints}
            </div>
        }
        .into_any()
    }
}

/// The diagram of every pipeline of the compiled kernel, with its loads, waits and release.
#[component]
fn PipelinePane(ui: Ui) -> impl IntoView {
    view! {
        <p class="stale" class:hidden=move || ui.diags.with(|d| d.is_empty())>
            "last successful compile (the program has errors)"
        </p>
        <div inner_html=move || ui.compiled.with(|c| c.as_ref().map(|c| pipeline::html(&c.pipeline)))></div>
    }
}

fn fmt_opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| "—".into())
}

#[component]
fn RunPane(ui: Ui) -> impl IntoView {
    let stages = ["queued", "compiling", "running", "validating", "done"];
    view! {
        <div class="run">
            <div class="run-form">
                <label>
                    "iterations "
                    <input
                        type="number"
                        min="1"
                        id="iters"
                        prop:value=move || ui.iters.get().to_string()
                        on:change=move |ev| {
                            if let Ok(v) = event_target_value(&ev).trim().parse::<u32>() {
                                ui.iters.set(v.max(1));
                            }
                        }
                    />
                </label>
                <label>
                    "seed "
                    <input
                        type="number"
                        min="0"
                        id="seed"
                        prop:value=move || ui.seed.get().to_string()
                        on:change=move |ev| {
                            if let Ok(v) = event_target_value(&ev).trim().parse::<u64>() {
                                ui.seed.set(v);
                            }
                        }
                    />
                </label>
                <crate::torch_pane::PeersToggle />
                <crate::profile_view::ProfileToggle />
                <span title=move || ui.runner.with(|r| r.run_blocked()).unwrap_or("Run on the runner's GPU")>
                    <button
                        class="primary"
                        id="run-pane-run"
                        disabled=move || matches!(ui.run.get(), RunState::Active { .. }) || ui.runner.with(|r| r.run_blocked().is_some())
                        on:click=move |_| ui.run()
                    >
                        "▶ Run (Ctrl+Enter)"
                    </button>
                </span>
                <span class="runner-line" id="runner-line">
                    {move || match ui.runner.get() {
                        RunnerStatus::Checking => "Checking the runner…".to_string(),
                        RunnerStatus::Up(d) | RunnerStatus::Fake(d) => d,
                        s => s.run_blocked().unwrap_or_default().to_string(),
                    }}
                </span>
            </div>
            <div id="run-result">
                {move || match ui.run.get() {
                    RunState::Idle => view! {
                        <p class="note">
                            "Run sends the program and the sizes to the runner, which compiles the CUDA with NVRTC for sm_90a, \
                             launches it, validates every output against a float64 reference and times it against the \
                             device's copy bandwidth."
                        </p>
                    }
                    .into_any(),
                    RunState::Active { stage, job, .. } => {
                        let at = stages.iter().position(|s| *s == stage);
                        view! {
                            <ol class="stages">
                                {stages
                                    .iter()
                                    .enumerate()
                                    .map(|(i, s)| {
                                        let class = match at {
                                            Some(a) if i < a => "stage past",
                                            Some(a) if i == a => "stage now",
                                            _ => "stage",
                                        };
                                        view! { <li class=class>{*s}</li> }
                                    })
                                    .collect_view()}
                            </ol>
                            <p class="note">
                                {match job {
                                    Some(j) => format!("job {j}: {stage}…"),
                                    None => format!("{stage}…"),
                                }}
                                " "
                                <button id="stop-waiting" on:click=move |_| ui.stop_waiting()>
                                    "Stop waiting"
                                </button>
                            </p>
                        }
                        .into_any()
                    }
                    RunState::Failed(msg) => view! { <div class="error" id="run-error">{msg}</div> }.into_any(),
                    RunState::Done(r) => view! { <RunResult r=r /> }.into_any(),
                }}
            </div>
        </div>
    }
}

fn checks_table(checks: &[runner::Check]) -> impl IntoView + use<> {
    let rows = checks
        .iter()
        .map(|c| {
            view! {
                <tr class=if c.passed { "ok" } else { "bad" }>
                    <td class="mono">{c.output.clone()}</td>
                    <td>{if c.passed { "pass" } else { "FAIL" }}</td>
                    <td class="mono">{fmt_opt(c.rel_l2, |x| format!("{x:.3e}"))}</td>
                    <td class="mono">{fmt_opt(c.max_abs, |x| format!("{x:.3e}"))}</td>
                    <td class="mono">{fmt_opt(c.tolerance, |x| format!("{x:.0e}"))}</td>
                    <td class="mono">{c.elements.map(|e| e.to_string()).unwrap_or_default()}</td>
                    <td class="mono">{if c.non_finite > 0 { format!("{} NaN/inf", c.non_finite) } else { String::new() }}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <table class="params">
            <tr>
                <th>"output"</th><th>""</th><th>"rel L2"</th><th>"max abs"</th><th>"tolerance"</th><th>"elements"</th><th>""</th>
            </tr>
            {rows}
        </table>
    }
}

/// A finished job: the stages it went through, then its result; an A/B job shows B/A with its
/// spread (when both were measured) and both results.
#[component]
fn RunResult(r: Arc<RunView>) -> impl IntoView {
    let stages = (!r.stages.is_empty()).then(|| {
        let list = r
            .stages
            .iter()
            .map(|s| view! { <li class="stage past">{s.clone()}</li> })
            .collect_view();
        view! { <ol class="stages" id="run-stages">{list}</ol> }
    });
    let Some(b) = r.b.clone() else {
        return view! { <div class="result">{stages}{run_outcome(&r, true)}</div> }.into_any();
    };
    let comparison = match &r.comparison {
        Some(c) => {
            let spread = c
                .range
                .map(|(lo, hi)| format!("{lo:.3} – {hi:.3}"))
                .unwrap_or_else(|| "—".into());
            let mut facts = Vec::new();
            if let (Some(a), Some(b)) = (c.a_median_us, c.b_median_us) {
                facts.push(format!("medians A {a:.2} µs, B {b:.2} µs"));
            }
            if let Some(o) = &c.order {
                facts.push(format!("launches {o}"));
            }
            match c.same_inputs {
                Some(true) => facts.push("same inputs".into()),
                Some(false) => facts.push("different inputs".into()),
                None => {}
            }
            view! {
                <div class="headline">
                    <div class="big" id="ab-ratio">
                        <span class="label">"B / A (median of pairs)"</span>
                        <span class="value">{format!("{:.3}", c.median)}</span>
                    </div>
                    <div class="big">
                        <span class="label">"spread (min – max)"</span>
                        <span class="value" id="ab-spread">{spread}</span>
                    </div>
                </div>
                <p class="note" id="ab-text">{c.text()}</p>
                <p class="note">{facts.join(" · ")}</p>
            }
            .into_any()
        }
        None => {
            let why = if r.status == "fake" || b.status == "fake" {
                "No B/A ratio: the fake worker measures nothing."
            } else {
                "No B/A ratio: it needs both programs measured on the GPU (see each result)."
            };
            view! { <p class="note" id="ab-none">{why}</p> }.into_any()
        }
    };
    view! {
        <div class="result">
            {stages}
            {comparison}
            <section class="ab-part" id="run-a">
                <h3 class="ab-title">"A"</h3>
                {run_outcome(&r, true)}
            </section>
            <section class="ab-part" id="run-b">
                <h3 class="ab-title">"B"</h3>
                {run_outcome(&b, false)}
            </section>
        </div>
    }
    .into_any()
}

/// One program's result by status: a measurement (passed, failed), what the fake worker checked
/// (fake: never a number), or what went wrong. Element ids only on the `primary` one (A).
fn run_outcome(r: &RunView, primary: bool) -> AnyView {
    let id = move |name: &'static str| primary.then_some(name);
    let steps = (!r.progress.is_empty()).then(|| {
        view! {
            <tr><th>"worker steps"</th><td class="mono" id=id("run-steps")>{r.progress.join(" → ")}</td></tr>
        }
    });
    // The job and the worker are the whole job's: shown with A.
    let job = r.job_id.clone().filter(|_| primary).map(|j| {
        // The distributed mode names the agent (GPU host) that ran it.
        let j = match &r.agent {
            Some(agent) => format!("{j} on agent {agent}"),
            None => j,
        };
        view! { <tr><th>"job"</th><td class="mono">{j}</td></tr> }
    });
    let worker_ms = r.worker_ms.filter(|_| primary).map(
        |ms| view! { <tr><th>"worker time"</th><td class="mono">{format!("{ms:.0} ms")}</td></tr> },
    );
    let body = if let Some(fk) = r.fake.clone() {
        view! {
            <div class="fake-result" id=id("fake-result")>
                <p class="fake-headline">
                    <strong>"Not measured. "</strong>
                    {if fk.note.is_empty() {
                        "The fake worker compiled the program and checked its sizes; nothing ran on a GPU.".to_string()
                    } else {
                        fk.note.clone()
                    }}
                    " There is no time, bandwidth or validation."
                </p>
                <table class="kv">
                    <tr><th>"kernel"</th><td class="mono">{fk.kernel.clone().unwrap_or_else(|| "—".into())}</td></tr>
                    <tr><th>"launch"</th><td class="mono">{fk.launch.clone().unwrap_or_else(|| "—".into())}</td></tr>
                    <tr><th>"index type"</th><td class="mono">{fk.index.clone().unwrap_or_else(|| "—".into())}</td></tr>
                    <tr><th>"tensors"</th><td class="mono">{fmt_opt(fk.working_set_bytes, model::bytes)}</td></tr>
                    <tr><th>"CUDA source"</th><td class="mono">{fmt_opt(fk.cuda_bytes, model::bytes)}</td></tr>
                    {steps}
                    {job}
                </table>
            </div>
        }
        .into_any()
    } else if let Some(m) = r.measured.clone() {
        let rows = view! { {steps}{job}{worker_ms} }.into_any();
        measured_view(r, m, rows, primary).into_any()
    } else {
        // `message` of an error result is `error.message` behind its stage: show one of them.
        let detail = r
            .error
            .clone()
            .or_else(|| r.message.clone())
            .unwrap_or_default();
        view! {
            <div class="error" id=id("run-error")>{detail}</div>
            <table class="kv">{steps}{job}{worker_ms}</table>
            {r.stderr.clone().map(|e| view! { <h3>"worker stderr"</h3><pre class="log" id=id("run-stderr")>{e}</pre> })}
        }
        .into_any()
    };
    view! {
        <p class=format!("run-status s-{}", r.status) id=id("run-status")>
            <span class="label">{r.status.clone()}</span>
            " "
            {r.headline()}
        </p>
        {body}
    }
    .into_any()
}

fn measured_view(
    r: &RunView,
    m: runner::Measured,
    rows: AnyView,
    primary: bool,
) -> impl IntoView + use<> {
    let id = move |name: &'static str| primary.then_some(name);
    // A matrix product is measured in TFLOP/s against cuBLAS, anything else in GB/s against the
    // device copy.
    let matmul = m.tflops.is_some();
    let ratio = if matmul { m.cublas_ratio } else { m.ratio };
    let pct = ratio.map(|x| (x * 100.0).clamp(0.0, 100.0)).unwrap_or(0.0);
    let (rate_label, rate) = match m.tflops {
        Some(t) => ("compute", format!("{t:.2} TFLOP/s")),
        None => ("bandwidth", fmt_opt(m.gbps, |g| format!("{g:.0} GB/s"))),
    };
    let ratio_title = if matmul {
        "achieved TFLOP/s / cuBLAS TFLOP/s on the same shape, layouts and types, measured by the same worker"
    } else {
        "achieved bandwidth / device-to-device copy bandwidth measured by the same worker"
    };
    let ratio_text = match (matmul, ratio) {
        (true, Some(x)) => format!(
            "{:.1}% of cuBLAS ({})",
            x * 100.0,
            fmt_opt(m.cublas_tflops, |c| format!("{c:.2} TFLOP/s"))
        ),
        (true, None) => format!(
            "cuBLAS not measured: {}",
            m.cublas_skipped
                .clone()
                .unwrap_or_else(|| "no reason given".into())
        ),
        (false, Some(x)) => match m.ceiling_gbps {
            Some(c) => format!("{:.1}% of the copy ceiling ({c:.0} GB/s)", x * 100.0),
            None => format!("{:.1}% of the ceiling", x * 100.0),
        },
        (false, None) => "no ceiling measured".to_string(),
    };
    let cublas_row = m.cublas_call.clone().map(|call| {
        let check = m.cublas_check.clone().map(|c| {
            format!(
                "; its output {} the reference (rel L2 {})",
                if c.passed { "matches" } else { "DOES NOT match" },
                fmt_opt(c.rel_l2, |x| format!("{x:.3e}"))
            )
        });
        view! {
            <tr><th>"cuBLAS"</th><td class="mono" id=id("cublas")>{format!("{call}{}", check.unwrap_or_default())}</td></tr>
        }
    });
    let verdict = if m.passed {
        ("v-pass", "passed")
    } else {
        ("v-fail", "FAILED")
    };
    let spills = match m.local_bytes {
        Some(0) => "none".to_string(),
        Some(b) => format!("{b} B local memory per thread"),
        None => "—".to_string(),
    };
    let message = r.message.clone();
    let after = (!m.checks_after_timing.is_empty()).then(|| {
        view! {
            <h3>"Checked again after the timed launches"</h3>
            {checks_table(&m.checks_after_timing)}
        }
    });
    view! {
        {message.map(|msg| view! { <p class="note">{msg}</p> })}
        <div class="headline">
            <div class="big">
                <span class="label">"median"</span>
                <span class="value" id=id("median")>{fmt_opt(m.median_us, |x| format!("{x:.2} µs"))}</span>
            </div>
            <div class="big">
                <span class="label">{rate_label}</span>
                <span class="value" id=id("rate")>{rate}</span>
            </div>
            <div class=format!("big verdict {}", verdict.0) id=id("verdict")>
                <span class="label">"validation"</span>
                <span class="value">{verdict.1}</span>
            </div>
        </div>
        <div class="ratio" title=ratio_title>
            <div class="ratio-bar" style:width=format!("{pct:.1}%")></div>
            <span class="ratio-text">{ratio_text}</span>
        </div>
        {m.peers.as_ref().map(|p| view! { <div inner_html=crate::torch_pane::peers_html(p, primary)></div> })}
        <table class="kv">
            <tr><th>"device"</th><td>{m.device.clone().unwrap_or_else(|| "—".into())}</td></tr>
            {cublas_row}
            <tr><th>"launch"</th><td class="mono">{m.launch.clone().unwrap_or_else(|| "—".into())}</td></tr>
            <tr>
                <th>"time"</th>
                <td class="mono">
                    {format!(
                        "min {}  median {}  max {}{}",
                        fmt_opt(m.min_us, |x| format!("{x:.2} µs")),
                        fmt_opt(m.median_us, |x| format!("{x:.2} µs")),
                        fmt_opt(m.max_us, |x| format!("{x:.2} µs")),
                        m.samples.map(|s| format!("  ({s} launches)")).unwrap_or_default()
                    )}
                </td>
            </tr>
            <tr><th>"L2 between launches"</th><td class="mono">{m.l2_policy.clone().unwrap_or_else(|| "—".into())}</td></tr>
            <tr><th>"registers / thread"</th><td class="mono">{m.registers.map(|x| x.to_string()).unwrap_or_else(|| "—".into())}</td></tr>
            <tr>
                <th>"shared memory"</th>
                <td class="mono">
                    {format!(
                        "{} static, {} dynamic",
                        m.static_smem.map(|x| model::bytes(x as f64)).unwrap_or_else(|| "—".into()),
                        m.dynamic_smem.map(|x| model::bytes(x as f64)).unwrap_or_else(|| "—".into())
                    )}
                </td>
            </tr>
            <tr><th>"spills"</th><td class="mono">{spills}</td></tr>
            <tr><th>"index type"</th><td class="mono">{m.index.clone().unwrap_or_else(|| "—".into())}</td></tr>
            <tr><th>"seed"</th><td class="mono">{m.seed.map(|s| s.to_string()).unwrap_or_else(|| "—".into())}</td></tr>
            <tr>
                <th>"NVRTC"</th>
                <td class="mono">
                    {match (m.nvrtc_ms, m.cubin_cached) {
                        (Some(ms), Some(true)) => format!("cached CUBIN (read in {ms:.1} ms)"),
                        (Some(ms), _) => format!("{ms:.1} ms, no warnings"),
                        _ => "—".into(),
                    }}
                </td>
            </tr>
            {rows}
        </table>
        <h3>"Validation against the float64 reference"</h3>
        {checks_table(&m.checks)}
        {after}
        {m.profile.as_ref().map(|p| view! { <div inner_html=crate::profile_view::profile_html(p, primary)></div> })}
    }
}

#[component]
fn DialogView(ui: Ui, dialog: Dialog) -> impl IntoView {
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

/// The language reference (web/src/reference.rs; docs/language.md is the same table).
fn reference_view() -> impl IntoView {
    let sections = reference::Kind::ALL
        .iter()
        .map(|&kind| {
            let rows = reference::of_kind(kind)
                .map(|e| {
                    view! {
                        <tr id=format!("ref-{}", e.name)>
                            <td class="mono ref-name">{e.name}</td>
                            <td class="mono ref-sig">{e.signature}</td>
                            <td>{e.doc}</td>
                        </tr>
                    }
                })
                .collect_view();
            view! {
                <h3 id=format!("ref-section-{}", kind.anchor())>{kind.title()}</h3>
                <table class="params ref-table">{rows}</table>
            }
        })
        .collect_view();
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
        {sections}
        <h3 id="ref-section-examples">"Examples (the Examples menu)"</h3>
        {examples}
    }
}
