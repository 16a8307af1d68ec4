//! The page's state as it changes: the programs of tabs A and B (one CodeMirror editor serves
//! both, keeping each tab's own state and undo history), the in-page compilation of the tab
//! shown (every pane follows it), the [`State`] a link holds, toasts and the clipboard.

use super::{now_ms, RunState, RunnerStatus, ShortLink, TuneState, Ui, DEFAULT_SIZE, WRAP_KEY};
use crate::js;
use crate::model;
use crate::runner::Settings;
use crate::share::{self, Pane, PassMode, State, Tab};
use leptos::prelude::*;
use leptos::task::spawn_local;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

impl Ui {
    pub(super) fn new(embedded: bool) -> Ui {
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
            scalars: RwSignal::new(BTreeMap::new()),
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
            tune: RwSignal::new(TuneState::Idle),
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
            tune_stream: StoredValue::new_local(None),
            written: RwSignal::new(String::new()),
            baseline: StoredValue::new((String::new(), None)),
            embedded,
        }
    }

    /// Compiles `text` in the page and updates every pane.
    pub(super) fn compile(self, text: String) {
        let t0 = now_ms();
        let result = self.sizes.with_untracked(|s| model::compile(&text, s));
        let ms = t0.zip(now_ms()).map(|(a, b)| b - a);
        match result {
            Ok(c) => {
                let missing = self
                    .sizes
                    .with_untracked(|s| c.symbols.iter().any(|sym| !s.contains_key(sym)));
                if missing {
                    self.sizes.update(|s| {
                        for sym in &c.symbols {
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

    /// Lays the program of the tab shown out regularly (`format.rs`), as one undoable edit.
    pub(super) fn format(self) {
        self.sync();
        let text = self.text_of(self.tab.get_untracked());
        let formatted = crate::format::format_program(&text);
        if formatted == text {
            self.say("The program is already formatted");
        } else {
            self.set_program(&formatted);
        }
    }

    /// The program of `tab` (A's when there is no B).
    pub(super) fn text_of(self, tab: Tab) -> String {
        match tab {
            Tab::B => self
                .program_b
                .get_untracked()
                .unwrap_or_else(|| self.program.get_untracked()),
            Tab::A => self.program.get_untracked(),
        }
    }

    /// The program of the tab shown, tracked.
    pub(super) fn shown_text(self) -> String {
        match self.tab.get() {
            Tab::B => self.program_b.get().unwrap_or_else(|| self.program.get()),
            Tab::A => self.program.get(),
        }
    }

    /// Shows `tab` in the editor and compiles its program (the panes follow).
    pub(super) fn show(self, tab: Tab) {
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
    pub(super) fn select_tab(self, tab: Tab) {
        if tab == self.tab.get_untracked()
            || (tab == Tab::B && self.program_b.with_untracked(Option::is_none))
        {
            return;
        }
        self.sync();
        self.show(tab);
    }

    /// Opens tab B with a copy of A's program.
    pub(super) fn open_b(self) {
        self.sync();
        if self.program_b.with_untracked(Option::is_none) {
            self.program_b.set(Some(self.program.get_untracked()));
        }
        self.show(Tab::B);
    }

    /// Closes tab B (its program is dropped) and shows A.
    pub(super) fn close_b(self) {
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

    pub(super) fn push_diagnostics(self) {
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
    pub(super) fn set_program(self, text: &str) {
        self.editor.with_value(|e| {
            if let Some(e) = e {
                e.set_text(text);
            }
        });
        self.compile(text.to_string());
    }

    pub(super) fn state(self) -> State {
        State {
            program: self.program.get_untracked(),
            sizes: self.sizes.get_untracked(),
            scalars: self.scalars.get_untracked(),
            pane: self.pane.get_untracked(),
            pass: self.pass.get_untracked(),
            pass_mode: self.pass_mode.get_untracked(),
            iters: self.iters.get_untracked(),
            seed: self.seed.get_untracked(),
            program_b: self.program_b.get_untracked(),
            tab: self.tab.get_untracked(),
        }
    }

    pub(super) fn apply(self, s: State) {
        self.sizes.set(s.sizes);
        self.scalars.set(s.scalars);
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

    /// Appends the automatic schedule `block` to the program shown (one undoable edit) and
    /// compiles it: from then on it is the program's own schedule.
    pub(super) fn insert_schedule(self, block: &str) {
        self.sync();
        let text = self.text_of(self.tab.get_untracked());
        self.set_program(&crate::auto_note::with_schedule(&text, block));
        self.say("The automatic schedule is the program's own now: edit it in the editor");
    }

    /// A short message at the bottom of the page for a few seconds.
    pub(super) fn say(self, msg: impl Into<String>) {
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

    pub(super) fn copy(self, text: String, what: &'static str) {
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
    pub(super) fn sync(self) {
        let text = self.editor.with_value(|e| e.as_ref().map(|e| e.text()));
        if let Some(text) = text {
            if text != self.text_of(self.tab.get_untracked()) {
                self.compile(text);
            }
        }
    }
}
