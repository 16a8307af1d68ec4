//! Tune: the program sent to the runner's tuner (`POST /api/tune`), its job followed through
//! its server-sent events (each candidate's step as it happens) into [`TuneState`], cancelled on
//! request (`POST /api/jobs/{id}/cancel`), and the Tune section of the Run pane: the progress,
//! then the table of candidates with "Use" on each usable one and "Use the winner's schedule",
//! which replaces the program's schedule block in the editor (one undoable edit).

use super::run::follow_events;
use super::{TuneState, Ui, DEFAULT_SIZE};
use crate::runner::{self, TuneRow};
use crate::share::{Pane, Tab};
use leptos::prelude::*;
use leptos::task::spawn_local;
use std::sync::Arc;
use wasm_bindgen::prelude::*;

impl Ui {
    /// Sends the program shown to the tuner and follows the job's events.
    pub(super) fn tune(self) {
        if matches!(self.tune.get_untracked(), TuneState::Active { .. }) {
            return;
        }
        if let Some(why) = self.runner.with_untracked(|r| r.run_blocked()) {
            self.say(why.replace("Run is off", "Tune is off"));
            return;
        }
        self.pane.set(Pane::Run);
        self.sync();
        if let Some(d) = self.diags.with_untracked(|d| d.first().cloned()) {
            self.tune.set(TuneState::Failed(format!(
                "The program does not compile ({}); fix it before tuning.",
                d.located()
            )));
            return;
        }
        if let Some((sym, (text, why))) = self
            .size_errors
            .with_untracked(|e| e.first_key_value().map(|(k, v)| (k.clone(), v.clone())))
        {
            self.tune.set(TuneState::Failed(format!(
                "The size {sym}={text} is not valid ({why}); fix it before tuning."
            )));
            return;
        }
        let Some(c) = self.compiled.get_untracked() else {
            return;
        };
        let sizes = self
            .sizes
            .with_untracked(|s| crate::model::sizes_of(&c.symbols, s, DEFAULT_SIZE));
        let tab = self.tab.get_untracked();
        let body = runner::tune_body(
            &self.text_of(tab),
            &sizes,
            self.iters.get_untracked(),
            self.seed.get_untracked(),
        );
        let settings = self.settings.get_untracked();
        self.tune.set(TuneState::Active {
            job: None,
            steps: Vec::new(),
            tab,
        });
        let tune = self.tune;
        spawn_local(async move {
            let job = match runner::start_tune(&settings, &body).await {
                Ok(job) => job,
                Err(e) => {
                    self.note_unreachable(&e, &settings);
                    tune.set(TuneState::Failed(e.describe(&settings)));
                    return;
                }
            };
            tune.set(TuneState::Active {
                job: Some(job.clone()),
                steps: Vec::new(),
                tab,
            });
            let job2 = job.clone();
            let on_event =
                Closure::<dyn FnMut(String, String)>::new(move |name: String, data: String| {
                    let TuneState::Active { mut steps, .. } = tune.get_untracked() else {
                        return;
                    };
                    if name == "done" {
                        tune.set(match runner::parse_tune_done(&data) {
                            Ok(v) => TuneState::Done(Arc::new(v), tab),
                            Err(e) => TuneState::Failed(format!("Job {job2}: {e}: {data}")),
                        });
                        return;
                    }
                    let event: Result<hopfuse_api::job::JobEvent, _> = runner::read_json(&data);
                    match event {
                        Ok(e) => {
                            steps.extend(e.tune);
                            tune.set(TuneState::Active {
                                job: Some(job2.clone()),
                                steps,
                                tab,
                            });
                        }
                        Err(e) => tune.set(TuneState::Failed(format!(
                            "Job {job2}: unexpected event `{name}` from the runner ({e}): {data}"
                        ))),
                    }
                })
                .into_js_value();
            let ended = follow_events(&settings, &job, &on_event, self.tune_stream).await;
            if matches!(tune.get_untracked(), TuneState::Active { .. }) {
                tune.set(TuneState::Failed(ended));
            }
        });
    }

    /// Asks the runner to cancel the tune job: it stops after the candidate in progress and
    /// ends with the candidates so far (its `done` event then ends the section's wait).
    pub(super) fn cancel_tune(self) {
        let TuneState::Active { job: Some(job), .. } = self.tune.get_untracked() else {
            return;
        };
        let settings = self.settings.get_untracked();
        spawn_local(async move {
            match runner::cancel_job(&settings, &job).await {
                Ok(state) if state == "stopping" => {
                    self.say("Cancelling: the tuner stops after the candidate in progress")
                }
                Ok(_) => {}
                Err(e) => self.say(format!("Cancel failed: {}", e.describe(&settings))),
            }
        });
    }

    /// Replaces the schedule block of the program tuned (in its tab) with `block`: one edit,
    /// undone with Ctrl+Z.
    pub(super) fn use_schedule(self, tab: Tab, block: &str) {
        self.sync();
        if self.tab.get_untracked() != tab {
            self.show(tab);
        }
        let text = self.text_of(tab);
        self.set_program(&hopfuse_api::tune::with_schedule(&text, block));
        self.say("The tuned schedule is the program's own now (Ctrl+Z undoes it)");
    }
}

/// The Tune section of the Run pane: nothing until a tune starts.
#[component]
pub(super) fn TuneSection(ui: Ui) -> impl IntoView {
    move || match ui.tune.get() {
        TuneState::Idle => ().into_any(),
        TuneState::Active { job, steps, .. } => view! {
            <section id="tune-section" class="tune" aria-busy="true">
                <h3>"Tune"</h3>
                <p id="tune-progress" class="note" role="status">
                    {match job {
                        None => "sending…".to_string(),
                        Some(j) => format!("job {j}: {}", runner::progress_line(&steps)),
                    }}
                </p>
                <button id="tune-cancel" on:click=move |_| ui.cancel_tune()>
                    "Cancel tune"
                </button>
            </section>
        }
        .into_any(),
        TuneState::Failed(why) => view! {
            <section id="tune-section" class="tune">
                <h3>"Tune"</h3>
                <div id="tune-error" class="error" role="alert">{why}</div>
            </section>
        }
        .into_any(),
        TuneState::Done(v, tab) => {
            let winner = v.winner_schedule.clone().map(|block| {
                view! {
                    <button
                        id="tune-use-winner"
                        class="primary"
                        title="Replace the program's schedule block with the winner's (Ctrl+Z undoes it)"
                        on:click=move |_| ui.use_schedule(tab, &block)
                    >
                        "Use the winner's schedule"
                    </button>
                }
            });
            let rows = v
                .rows
                .iter()
                .cloned()
                .map(|row| view! { <TuneRowView ui=ui row=row tab=tab /> })
                .collect_view();
            view! {
                <section id="tune-section" class="tune">
                    <h3>"Tune"</h3>
                    <p id="tune-status" class=format!("tune-status {}", v.status.name())>
                        {v.status.name().replace('_', " ")}": "{v.message.clone()}
                    </p>
                    {v.confirmation.clone().map(|c| view! { <p class="tune-confirmation">{c}</p> })}
                    {winner}
                    <table id="tune-table" class="tune-table">
                        <thead>
                            <tr>
                                <th>"#"</th>
                                <th>"parameters"</th>
                                <th>"time"</th>
                                <th>"throughput"</th>
                                <th>"vs default"</th>
                                <th>"outcome"</th>
                                <th></th>
                            </tr>
                        </thead>
                        <tbody>{rows}</tbody>
                    </table>
                </section>
            }
            .into_any()
        }
    }
}

#[component]
fn TuneRowView(ui: Ui, row: TuneRow, tab: Tab) -> impl IntoView {
    let use_button = row.schedule.map(|block| {
        view! {
            <button
                class="tune-use"
                title="Replace the program's schedule block with this candidate's (Ctrl+Z undoes it)"
                on:click=move |_| ui.use_schedule(tab, &block)
            >
                "Use"
            </button>
        }
    });
    view! {
        <tr class=row.class class:winner=row.winner>
            <td>{row.number}{row.winner.then_some(" ★")}</td>
            <td>{row.parameters}</td>
            <td>{row.time}</td>
            <td>{row.throughput}</td>
            <td>{row.vs_default}</td>
            <td>{row.outcome}</td>
            <td>{use_button}</td>
        </tr>
    }
}

/// Whether Tune's button is off now: a tune is being followed, or runs are off (why).
pub(super) fn tune_blocked(ui: Ui) -> Option<&'static str> {
    if matches!(ui.tune.get(), TuneState::Active { .. }) {
        return Some("A tune is running: see the Run pane");
    }
    ui.runner.with(|r| r.run_blocked())
}
