//! The state outside the page: written to the address bar (always a full link) and to
//! localStorage after every change, restored from a fragment (`#v1:...`), a short link
//! (`#s:ID`, kept by the runner) or this browser's last state; the Share dialog's links; the
//! examples loaded with their `// bench:` sizes; whether the programs changed since they were
//! last loaded or shared (`beforeunload` asks).

use super::{pane_key, Dialog, RunState, ShortLink, Ui, LAST_STATE_KEY};
use crate::examples;
use crate::js;
use crate::runner;
use crate::share::{self, Pane};
use leptos::prelude::*;
use leptos::task::spawn_local;
use std::collections::BTreeMap;
use wasm_bindgen::prelude::*;

impl Ui {
    /// The programs as they are now count as shared (loaded from a link, copied, short-linked).
    pub(super) fn mark_shared(self) {
        self.baseline
            .set_value((self.program.get_untracked(), self.program_b.get_untracked()));
    }

    /// Whether the programs changed since they were last loaded or shared.
    pub(super) fn unshared_edits(self) -> bool {
        self.sync();
        let now = (self.program.get_untracked(), self.program_b.get_untracked());
        self.baseline.with_value(|b| *b != now)
    }

    /// Loads an example with the sizes of its `// bench:` line: the first one at once, any
    /// other once its text has come from `examples/` next to the page.
    pub(super) fn load_example(self, e: examples::Example) {
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
            match runner::fetch("GET", &url, "", None, 10_000).await {
                Ok(a) if a.status == 200 => show(&a.body),
                _ => self.say(format!(
                    "The example {url} could not be loaded from this server."
                )),
            }
        });
    }

    /// Restores the state a fragment names (`#v1:...` or a short link `#s:ID`); with none, the
    /// state this browser had last, else the first example. (Inflating is the browser's and
    /// asynchronous, so the page is not ready until it is done.)
    pub(super) fn restore(self, hash: &str) {
        self.ready.set(false);
        let settings = self.settings.get_untracked();
        let last = (hash.len() <= 1 && !self.embedded)
            .then(|| crate::storage_get(LAST_STATE_KEY))
            .flatten();
        let hash = hash.to_string();
        spawn_local(async move {
            if let Some(Ok(s)) = match last {
                Some(f) => Some(share::decode(&f).await),
                None => None,
            } {
                self.apply(s);
                self.mark_shared();
                self.ready.set(true);
                self.say("Your last program is back (kept in this browser).");
                return;
            }
            if let Some(id) = hash.strip_prefix("#s:") {
                match runner::get_link(&settings, id).await {
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
                return;
            }
            if hash.len() > 1 {
                match share::decode(&hash).await {
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
        });
    }

    /// Writes the state into the address bar (so the page URL is always a full link) and into
    /// localStorage (so the bare URL reopens it); `written` holds it for the Share dialog.
    /// (Deflating is the browser's and asynchronous: a state that changed meanwhile is left to
    /// the write its change started.)
    pub(super) fn write_fragment(self) {
        let state = self.state();
        spawn_local(async move {
            let fragment = format!("#{}", share::encode(&state).await);
            if self.state() != state || self.written.with_untracked(|w| *w == fragment) {
                return;
            }
            if !self.embedded {
                if let Ok(h) = window().history() {
                    let _ = h.replace_state_with_url(&JsValue::NULL, "", Some(&fragment));
                }
                crate::storage_set(LAST_STATE_KEY, &fragment);
            }
            self.written.set(fragment);
        });
    }

    /// The page's address without query and fragment.
    pub(super) fn page_url(self) -> String {
        let loc = window().location();
        format!(
            "{}{}",
            loc.origin().unwrap_or_default(),
            loc.pathname().unwrap_or_default()
        )
    }

    /// The full link: the page with the whole state in the fragment (as last written).
    pub(super) fn full_link(self) -> String {
        format!("{}{}", self.page_url(), self.written.get())
    }

    /// The read-only embed view of the current state, showing `pane`.
    pub(super) fn embed_link(self, pane: Pane) -> String {
        format!(
            "{}?embed={}{}",
            self.page_url(),
            pane_key(pane),
            self.written.get()
        )
    }

    /// Opens the Share dialog (full link, short link, embed snippet).
    pub(super) fn share(self) {
        self.sync();
        self.write_fragment();
        self.short.set(ShortLink::None);
        if self.pane.get_untracked() != Pane::Run {
            self.embed_pane.set(self.pane.get_untracked());
        }
        self.dialog.set(Some(Dialog::Share));
    }

    /// Copies `text` as the shared state (no unshared edits after it).
    pub(super) fn copy_shared(self, text: String, what: &'static str) {
        self.mark_shared();
        self.copy(text, what);
    }

    /// Opens the Share dialog and makes a short link there (`POST /api/links`), copied at once.
    pub(super) fn short_link(self) {
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
}
