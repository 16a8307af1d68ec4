//! The automatic-schedule line the CUDA, Launch plan and Run panes show for a program without a
//! schedule (its own module: both `panes` and `run_pane` use it, and `panes` uses `run_pane`).

use super::Ui;
use leptos::prelude::*;

/// For a program without a schedule: which scheduler wrote the automatic one and why, or
/// (marked as an error) that none did and the kernel is the serial default; "Insert schedule"
/// appends the automatic schedule to the program as its own. Nothing for a scheduled program.
#[component]
pub(super) fn AutoScheduleLine(ui: Ui, id: &'static str) -> impl IntoView {
    move || {
        // A fusion split into kernels: the split, not the first kernel's schedule (whose
        // "Insert schedule" would not fit the whole program).
        if let Some(text) = ui
            .compiled
            .with(|c| c.as_ref().and_then(|c| c.segments.clone()))
        {
            return Some(
                view! {
                    <div class="auto-schedule note" id=id role="status">
                        <span class="auto-text">{text}</span>
                    </div>
                }
                .into_any(),
            );
        }
        let note = ui
            .compiled
            .with(|c| c.as_ref().and_then(|c| c.plan.auto_schedule.clone()))?;
        let headline = crate::auto_note::headline(&note);
        let insert = crate::auto_note::schedule_block(&note).map(|block| {
            view! {
                <button
                    class="insert-schedule"
                    title="Append this schedule to the program as a schedule { } block, to edit it"
                    on:click=move |_| ui.insert_schedule(&block)
                >
                    "Insert schedule"
                </button>
            }
        });
        let (serial, role) = (
            headline.serial,
            if headline.serial { "alert" } else { "status" },
        );
        Some(
            view! {
                <div class="auto-schedule" class:error=serial class:note=!serial id=id role=role>
                    <span class="auto-text">{headline.text}</span>
                    " "
                    {insert}
                </div>
            }
            .into_any(),
        )
    }
}
