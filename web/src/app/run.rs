//! Runs: the runner's health (whether Run is on, and why not), and a run sent to it (with a
//! tab B, programs A and B as an A/B comparison) and followed through its server-sent events
//! (queued, compiling, running, validating, done) into [`RunState`]; Stop waiting.

use super::{RunState, RunnerStatus, Ui, DEFAULT_SIZE};
use crate::js;
use crate::model::{self, Diag};
use crate::runner::{self, ApiError, Settings};
use crate::share::{Pane, Tab};
use leptos::prelude::*;
use leptos::task::spawn_local;
use std::sync::Arc;
use wasm_bindgen::prelude::*;

impl Ui {
    /// Stops following the current job (it may still run on the runner).
    pub(super) fn stop_waiting(self) {
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

    pub(super) fn note_unreachable(self, e: &ApiError, settings: &Settings) {
        if let ApiError::Unreachable(_) = e {
            self.runner.set(RunnerStatus::Down(e.describe(settings)));
        }
    }

    pub(super) fn check_runner(self) {
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
    pub(super) fn run(self) {
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
        let mut symbols = c.symbols.clone();
        if program_b.is_some() {
            let other = match shown {
                Tab::A => Tab::B,
                Tab::B => Tab::A,
            };
            match model::compile(&self.text_of(other), &self.sizes.get_untracked()) {
                Ok(o) => symbols.extend(o.symbols.iter().cloned()),
                Err(d) => {
                    refuse(name(other), &d[0]);
                    return;
                }
            }
        }
        let sizes = self
            .sizes
            .with_untracked(|s| crate::model::sizes_of(&symbols, s, DEFAULT_SIZE));
        let (iters, seed) = (self.iters.get_untracked(), self.seed.get_untracked());
        let scalars = self
            .scalars
            .with_untracked(|typed| crate::scalar_inputs::for_run(&c.scalars, typed));
        let mut body = runner::run_body(
            &self.program.get_untracked(),
            program_b.as_deref(),
            &sizes,
            &scalars,
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
            let ended = follow_events(&settings, &job, &on_event, self.stream).await;
            if matches!(run.get_untracked(), RunState::Active { .. }) {
                run.set(RunState::Failed(ended));
            }
        });
    }
}

/// Follows job `job`'s event stream (`on_event` gets each event) until it closes, keeping it in
/// `slot` meanwhile so a cancel can close it; returns what to say if the job's state is still
/// active then: the stream failed, or ended without a result.
pub(super) async fn follow_events(
    settings: &Settings,
    job: &str,
    on_event: &JsValue,
    slot: StoredValue<Option<js::EventStream>, LocalStorage>,
) -> String {
    let stream = js::EventStream::new(
        &runner::events_url(settings, job),
        settings.token.trim(),
        on_event,
    );
    let done = stream.done();
    slot.set_value(Some(stream));
    let ended = wasm_bindgen_futures::JsFuture::from(done).await;
    slot.set_value(None);
    match ended {
        Err(e) => format!(
            "Job {job}: the event stream failed: {}",
            e.as_string().unwrap_or_else(|| format!("{e:?}"))
        ),
        Ok(_) => format!("Job {job}: the event stream ended without a result."),
    }
}
