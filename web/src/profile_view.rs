//! The Run pane's profile (issue 16): the "profile (ncu)" toggle that asks the runner to
//! profile the kernel with Nsight Compute after the run (`"profile": true`, docs/api.md), and
//! the profile of a measured run read from `result.profile`: the metrics table, the top warp
//! stalls with what each means, and the roofline (achieved FLOP/s against the copy and cuBLAS
//! ceilings the runner measured) as SVG. A runner without ncu, or without permission for the
//! GPU's counters, answers why, and that sentence is shown instead. A fusion run as several
//! kernels has a profile per kernel (`segments.kernels[].profile`), drawn by `kernels.rs`: the
//! kernels side by side, the whole fusion first, then one collapsible section per kernel.
//!
//! The result types and the roofline drawing are the runner's own (`hopfuse_api::profile`,
//! shared by both), so what the page draws is what `hopfuse run --roofline` writes.
//! Rendered as one HTML string (as the Pipeline and peers views are): less wasm than a view
//! per cell; every text from the runner is escaped, the SVG is built from numbers only.

use crate::pipeline::esc;
use hopfuse_api::profile::{self as report, Profile, ProfileReport, Roofline};
use hopfuse_api::service::RunBody;
use leptos::prelude::*;
use std::fmt::Write;

mod kernels;
pub use kernels::kernels_profile_html;

const PROFILE_KEY: &str = "hopfuse.profile";

/// Whether runs ask for a profile (the toggle, kept in localStorage).
pub fn wanted() -> bool {
    crate::storage_get(PROFILE_KEY).as_deref() == Some("on")
}

/// Asks for a profile in a run body when the toggle is on and the run has one program (the
/// runner profiles single programs only).
pub fn add_to_request(body: &mut RunBody) {
    add_profile(body, wanted());
}

fn add_profile(body: &mut RunBody, on: bool) {
    if on && body.program_b.is_none() {
        body.profile = Some(true);
    }
}

/// The Run pane's toggle.
#[component]
pub fn ProfileToggle() -> impl IntoView {
    let on = RwSignal::new(wanted());
    view! {
        <label title="After the run, profile the kernel with Nsight Compute on the runner: DRAM and L2, SM and tensor-pipe use, occupancy, warp stalls, bank conflicts and a roofline (needs ncu there; one program at a time)">
            <input
                type="checkbox"
                id="profile-toggle"
                prop:checked=move || on.get()
                on:change=move |ev| {
                    let v = event_target_checked(&ev);
                    on.set(v);
                    crate::storage_set(PROFILE_KEY, if v { "on" } else { "off" });
                }
            />
            " profile (ncu)"
        </label>
    }
}

/// What a stall reason means, in plain words (ncu's names).
pub fn stall_meaning(reason: &str) -> &'static str {
    match reason {
        "long_scoreboard" => "waiting for data from global or local memory",
        "short_scoreboard" => "waiting for shared memory or a special-function result",
        "barrier" => "waiting at a block barrier for the other warps",
        "membar" => "waiting at a memory fence",
        "wait" => "a fixed wait between dependent instructions",
        "lg_throttle" => "the queue of global-memory instructions is full",
        "mio_throttle" => "the queue of shared-memory and special instructions is full",
        "tex_throttle" => "the texture / TMA unit is busy",
        "math_pipe_throttle" => "the math pipe it needs is busy",
        "drain" => "waiting at exit for its stores to finish",
        "branch_resolving" => "waiting for a branch to be decided",
        "no_instruction" => "no instruction fetched yet (instruction cache)",
        "imc_miss" => "waiting for a constant (constant cache miss)",
        "dispatch_stall" => "the dispatcher held the instruction back",
        "not_selected" => "ready, but another warp was picked",
        "sleeping" => "sleeping (nanosleep, or a suspended barrier wait)",
        "gmma" => "waiting for tensor-core (wgmma) work",
        "misc" => "other reasons",
        _ => "",
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "—".into(), |v| format!("{v:.1}%"))
}

fn bytes(v: f64) -> String {
    format!("{}B", report::si(v))
}

/// The profile of a measured run as HTML. Element ids only on the `primary` result.
pub fn profile_html(r: &ProfileReport, primary: bool) -> String {
    let mut h = format!(
        "<section class=\"profile\"{}>",
        if primary { " id=\"profile\"" } else { "" }
    );
    match r {
        ProfileReport::Unavailable { .. } => h.push_str("<h3>Profile</h3>"),
        ProfileReport::Measured { profile, .. } => {
            let _ = write!(
                h,
                "<h3>Profile <span class=\"note\">Nsight Compute{}, one launch with clocks at \
                 base and caches flushed</span></h3>",
                ncu_version(profile)
            );
        }
    }
    report_body(&mut h, r, "the run's median time", primary);
    h.push_str("</section>");
    h
}

/// ` 2025.3`: ncu's version after "Nsight Compute", or nothing when ncu gave none.
fn ncu_version(p: &Profile) -> String {
    if p.ncu.is_empty() {
        String::new()
    } else {
        format!(" {}", esc(&p.ncu))
    }
}

/// What a report says under its heading: why there is no profile, or the metrics, the stalls
/// and the roofline (its point over `time`, said in the caption).
fn report_body(h: &mut String, r: &ProfileReport, time: &str, primary: bool) {
    let id = |name: &str| {
        if primary {
            format!(" id=\"{name}\"")
        } else {
            String::new()
        }
    };
    match r {
        ProfileReport::Unavailable { message, .. } => {
            let _ = write!(
                h,
                "<p class=\"note\"{}>No profile: {}</p>",
                id("profile-unavailable"),
                esc(message)
            );
        }
        ProfileReport::Measured {
            profile,
            roofline,
            roofline_missing,
        } => {
            metrics_table(h, profile, primary);
            stalls_table(h, profile, primary);
            match (roofline, roofline_missing) {
                (Some(rl), _) => roofline_box(h, rl, time, primary),
                (None, why) => {
                    let _ = write!(
                        h,
                        "<p class=\"note\"{}>No roofline: {}</p>",
                        id("roofline-missing"),
                        esc(why.as_deref().unwrap_or("a number it needs is missing"))
                    );
                }
            }
        }
    }
}

fn metrics_table(h: &mut String, p: &Profile, primary: bool) {
    let rows: [(&str, String, &str); 7] = [
        (
            "DRAM throughput",
            match (p.dram_throughput_pct, p.dram_bytes) {
                (t, Some(b)) => format!("{} of peak · {} moved", pct(t), bytes(b)),
                (t, None) => format!("{} of peak", pct(t)),
            },
            "bytes to and from device memory, against the memory's peak",
        ),
        (
            "L2 hit rate",
            pct(p.l2_hit_rate_pct),
            "sectors found in L2 (writes count as hits)",
        ),
        (
            "SM throughput",
            format!("{} of peak", pct(p.sm_throughput_pct)),
            "the busiest unit of the streaming multiprocessors",
        ),
        (
            "tensor pipes",
            format!("{} of peak", pct(p.tensor_pipe_pct)),
            "the busiest tensor-core pipe while the SMs were active",
        ),
        (
            "achieved occupancy",
            pct(p.achieved_occupancy_pct),
            "active warps per SM against the most it can hold",
        ),
        (
            "shared-memory bank conflicts",
            p.shared_bank_conflicts
                .map_or_else(|| "—".into(), |c| format!("{c:.0}")),
            "extra shared-memory cycles: loads and stores to the same bank",
        ),
        (
            "duration under ncu",
            p.duration_ns
                .map_or_else(|| "—".into(), |d| format!("{:.2} µs", d / 1e3)),
            "one launch, clocks locked to base (slower than the timed median)",
        ),
    ];
    let _ = write!(
        h,
        "<table class=\"kv\"{}>",
        if primary {
            " id=\"profile-metrics\""
        } else {
            ""
        }
    );
    for (name, value, title) in rows {
        let _ = write!(
            h,
            "<tr title=\"{}\"><th>{}</th><td class=\"mono\">{}</td></tr>",
            esc(title),
            esc(name),
            esc(&value)
        );
    }
    h.push_str("</table>");
}

/// What the stalls' bars are shares of: the cycles between issues, all reasons together (ncu's
/// own total when it gave one, else the listed stalls' sum).
fn stall_total(p: &Profile) -> f64 {
    p.warp_cycles_per_issued
        .filter(|t| *t > 0.0)
        .unwrap_or_else(|| p.stalls.iter().map(|s| s.value).sum::<f64>())
}

fn stalls_table(h: &mut String, p: &Profile, primary: bool) {
    let total = stall_total(p);
    let _ = write!(
        h,
        "<h4>Top warp stalls <span class=\"note\">{}{}</span></h4>",
        esc(&p.stall_unit),
        p.warp_cycles_per_issued
            .map(|t| format!(" · {t:.1} cycles between issues in all"))
            .unwrap_or_default()
    );
    if p.stalls.is_empty() {
        let _ = write!(
            h,
            "<p class=\"note\"{}>ncu reported no warp-stall reasons for this launch.</p>",
            if primary {
                " id=\"profile-stalls\""
            } else {
                ""
            }
        );
        return;
    }
    let _ = write!(
        h,
        "<table class=\"stalls\"{}>",
        if primary {
            " id=\"profile-stalls\""
        } else {
            ""
        }
    );
    for s in &p.stalls {
        let share = if total > 0.0 {
            (s.value / total * 100.0).clamp(0.0, 100.0)
        } else {
            0.0
        };
        let _ = write!(
            h,
            "<tr><td class=\"mono\">{}</td><td class=\"mono num\">{:.2}</td>\
             <td class=\"bar-cell\"><span class=\"stall-bar\" style=\"width:{share:.1}%\"></span></td>\
             <td class=\"note\">{}</td></tr>",
            esc(&s.reason.replace('_', " ")),
            s.value,
            esc(stall_meaning(&s.reason))
        );
    }
    h.push_str("</table>");
}

/// The roofline picture and its caption: the point is the FLOP/s and DRAM bytes/s over `time`.
fn roofline_box(h: &mut String, r: &Roofline, time: &str, primary: bool) {
    let _ = write!(
        h,
        "<h4>Roofline</h4><div class=\"roofline-box\"{}>{}</div><p class=\"note\">{}FLOP/s \
         ({}) and {}B/s from DRAM over {time}; roofs measured by the same worker: \
         copy {}B/s{}.</p>",
        if primary { " id=\"roofline\"" } else { "" },
        r.svg(),
        report::si(r.flops_per_s),
        if r.flops_from == "plan" {
            "2·M·N·K of the matrix product"
        } else {
            "floating-point instructions ncu counted; tensor-core work not included"
        },
        report::si(r.bytes_per_s),
        report::si(r.copy_bytes_per_s),
        match (r.tensor_flops_per_s, &r.tensor_ceiling) {
            (Some(t), Some(call)) =>
                format!(", tensor cores {}FLOP/s: {}", report::si(t), esc(call)),
            (Some(t), None) => format!(", tensor cores {}FLOP/s (cuBLAS)", report::si(t)),
            (None, _) => ", no tensor-core roof measured".into(),
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// runner/tests/api_fixtures.rs writes them from the runner's own types.
    const PROFILED: &str = include_str!("../tests/fixtures/done-profile.json");
    const NO_NCU: &str = include_str!("../tests/fixtures/done-profile-unavailable.json");

    fn profile_of(fixture: &str) -> ProfileReport {
        let run = crate::runner::parse_result(fixture);
        assert_eq!(run.status, "passed", "{run:?}");
        run.measured.unwrap().profile.expect("a profile")
    }

    #[test]
    fn a_profiled_run_shows_its_metrics_stalls_and_roofline() {
        let p = profile_of(PROFILED);
        let html = profile_html(&p, true);
        for want in [
            "id=\"profile-metrics\"",
            "DRAM throughput",
            "75.5% of peak · 537 MB moved",
            "49.9%",
            "86.5%",
            "id=\"profile-stalls\"",
            "long scoreboard",
            "waiting for data from global or local memory",
            "18.42",
            "id=\"roofline\"",
            "<svg class=\"roofline\"",
            "copy 3.01 TB/s (measured)",
            "no tensor-core roof measured",
        ] {
            assert!(html.contains(want), "{want} not in {html}");
        }
        // The stalls in the runner's order (largest first), `selected` never among them.
        let first = html.find("long scoreboard").unwrap();
        let second = html.find(">barrier<").unwrap();
        assert!(first < second);
        assert!(!html.contains(">selected<"));
        // The bar of the largest stall is its share of the cycles between issues.
        assert!(html.contains("width:57.6%"), "{html}");
        // B's copy has no ids.
        assert!(!profile_html(&p, false).contains(" id="));
    }

    #[test]
    fn a_runner_without_ncu_says_so_and_the_run_still_passes() {
        let p = profile_of(NO_NCU);
        let html = profile_html(&p, true);
        assert!(html.contains("id=\"profile-unavailable\""), "{html}");
        assert!(
            html.contains("No profile: Nsight Compute (ncu) not found"),
            "{html}"
        );
        assert!(!html.contains("<svg"));
    }

    #[test]
    fn a_missing_roofline_says_what_it_lacks_and_text_is_escaped() {
        let mut p = profile_of(PROFILED);
        if let ProfileReport::Measured {
            roofline,
            roofline_missing,
            profile,
        } = &mut p
        {
            *roofline = None;
            *roofline_missing = Some("no <copy> ceiling".into());
            profile.ncu = "<b>".into();
            profile.stalls.clear();
        }
        let html = profile_html(&p, true);
        assert!(
            html.contains("No roofline: no &lt;copy&gt; ceiling"),
            "{html}"
        );
        assert!(html.contains("Nsight Compute &lt;b&gt;"));
        assert!(html.contains("ncu reported no warp-stall reasons"));
    }

    #[test]
    fn the_toggle_asks_for_a_profile_of_single_programs_only() {
        let program = |b: Option<&str>| RunBody {
            program: "p".into(),
            program_b: b.map(str::to_string),
            ..RunBody::default()
        };
        let mut one = program(None);
        add_profile(&mut one, true);
        assert_eq!(one.profile, Some(true));
        assert_eq!(serde_json::to_value(&one).unwrap()["profile"], true);
        let mut off = program(None);
        add_profile(&mut off, false);
        assert_eq!(off.profile, None);
        assert!(serde_json::to_value(&off).unwrap().get("profile").is_none());
        let mut ab = program(Some("q"));
        add_profile(&mut ab, true);
        assert_eq!(ab.profile, None);
        for reason in ["long_scoreboard", "barrier", "wait", "lg_throttle", "gmma"] {
            assert!(!stall_meaning(reason).is_empty(), "{reason}");
        }
    }

    /// With the tensor-core roof the worker measured, the picture draws it and the caption
    /// names its cuBLAS call (escaped).
    #[test]
    fn the_tensor_roof_is_drawn_and_named() {
        let run = crate::runner::parse_result(include_str!("../tests/fixtures/done-profile.json"));
        let mut p = run.measured.unwrap().profile.unwrap();
        if let ProfileReport::Measured {
            roofline: Some(r), ..
        } = &mut p
        {
            r.tensor_flops_per_s = Some(660e12);
            r.tensor_ceiling = Some("cublasGemmEx(N, N, m=8192, n=8192, k=8192) <bf16>".into());
        }
        let html = profile_html(&p, true);
        assert!(html.contains("class=\"rl-roof rl-tensor\""), "{html}");
        assert!(html.contains("cuBLAS 660 TFLOP/s (measured, tensor cores)"));
        assert!(html.contains(
            "tensor cores 660 TFLOP/s: cublasGemmEx(N, N, m=8192, n=8192, k=8192) &lt;bf16&gt;"
        ));
    }
}
