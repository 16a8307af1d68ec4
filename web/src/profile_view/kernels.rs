//! The profiles of a fusion run as several kernels (issue 34). The runner profiles each kernel
//! of a split run alone into its `segments.kernels[].profile` (`profile_segments` in
//! `runner/src/profile/mod.rs`) and leaves `result.profile` absent; this draws them:
//!
//! - one table of the kernels side by side, the whole fusion's row first (the kernels' durations
//!   under ncu and DRAM bytes added, their percentages weighted by each one's duration), then a
//!   row per kernel in launch order with its share of that time and its top warp stall; a
//!   kernel without a profile says why in its row;
//! - one collapsible section per profiled kernel, labelled with its place in the launch order,
//!   its name, its scheduler and why its segment ends where it does, holding what a one-kernel
//!   run's profile shows (metrics, stalls, roofline: the point over that kernel's own median
//!   time alone); the longest kernel's is open.
//!
//! When no kernel has a profile and all say the same reason (a runner without ncu), it is said
//! once, as for one kernel. Element ids only on the `primary` result (A's).

use super::{bytes, ncu_version, pct, report_body, stall_total};
use crate::pipeline::esc;
use crate::runner::{KernelRow, KernelsView};
use hopfuse_api::profile::{Profile, ProfileReport};
use std::fmt::Write;

/// The columns of the kernels' table after `#` and `kernel`.
const COLUMNS: [(&str, &str); 8] = [
    (
        "under ncu",
        "one launch under ncu, clocks locked to base (slower than the timed median)",
    ),
    ("share", "of the kernels' time under ncu, all together"),
    ("DRAM", "DRAM throughput, of the memory's peak"),
    ("moved", "bytes to and from device memory"),
    (
        "SM",
        "the busiest unit of the streaming multiprocessors, of its peak",
    ),
    ("tensor pipes", "the busiest tensor-core pipe, of its peak"),
    (
        "occupancy",
        "achieved: active warps per SM against the most it can hold",
    ),
    (
        "top warp stall",
        "the largest stall reason, as a share of the cycles between issues",
    ),
];

/// The profiles of a split fusion's kernels as HTML; None when no kernel carries one (the run
/// did not ask for a profile).
pub fn kernels_profile_html(k: &KernelsView, primary: bool) -> Option<String> {
    if k.rows.iter().all(|r| r.profile.is_none()) {
        return None;
    }
    let id = |name: &str| {
        if primary {
            format!(" id=\"{name}\"")
        } else {
            String::new()
        }
    };
    let count = k.rows.len();
    let mut h = format!(
        "<section class=\"profile profile-kernels\"{}>",
        id("profile")
    );
    if let Some(why) = one_reason(&k.rows) {
        let _ = write!(
            h,
            "<h3>Profile</h3><p class=\"note\"{}>No profile of any of the {count} kernels: {}</p>\
             </section>",
            id("profile-unavailable"),
            esc(why)
        );
        return Some(h);
    }
    let ncu = k
        .rows
        .iter()
        .find_map(|r| measured(r).map(ncu_version))
        .unwrap_or_default();
    let _ = write!(
        h,
        "<h3>Profile of each kernel <span class=\"note\">Nsight Compute{ncu}, each of the \
         {count} kernels alone: one launch with clocks at base and caches flushed</span></h3>"
    );
    kernels_table(&mut h, &k.rows, primary);
    let longest = longest(&k.rows);
    for (i, row) in k.rows.iter().enumerate() {
        let Some(report @ ProfileReport::Measured { .. }) = &row.profile else {
            continue;
        };
        let _ = write!(
            h,
            "<details class=\"profile-kernel\"{}{}><summary><span class=\"mono\">kernel {} of \
             {count}: {}</span> <span class=\"note\">{}{}</span></summary>",
            id(&format!("profile-kernel-{}", i + 1)),
            if longest == Some(i) { " open" } else { "" },
            i + 1,
            esc(&row.kernel),
            esc(&row.scheduler),
            if row.reason.is_empty() {
                String::new()
            } else {
                format!("; {}", esc(&row.reason))
            }
        );
        report_body(&mut h, report, "this kernel's median time alone", false);
        h.push_str("</details>");
    }
    h.push_str("</section>");
    Some(h)
}

/// A kernel's profile when ncu measured one.
fn measured(row: &KernelRow) -> Option<&Profile> {
    match &row.profile {
        Some(ProfileReport::Measured { profile, .. }) => Some(profile),
        _ => None,
    }
}

/// The one reason none of the kernels has a profile, when they all give the same.
fn one_reason(rows: &[KernelRow]) -> Option<&str> {
    let mut reasons = rows.iter().map(|r| match &r.profile {
        Some(ProfileReport::Unavailable { message, .. }) => Some(message.as_str()),
        _ => None,
    });
    let first = reasons.next()??;
    reasons.all(|r| r == Some(first)).then_some(first)
}

/// The kernel that took longest under ncu (the first of equals): its section opens.
fn longest(rows: &[KernelRow]) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, row) in rows.iter().enumerate() {
        let Some(d) = measured(row).and_then(|p| p.duration_ns) else {
            continue;
        };
        if best.is_none_or(|(_, b)| d > b) {
            best = Some((i, d));
        }
    }
    best.map(|(i, _)| i)
}

/// `value` averaged over the kernels, each weighted by its duration under ncu: the whole
/// sequence's figure. None when a kernel lacks it.
fn weighted(
    kernels: &[&Profile],
    total_ns: f64,
    value: fn(&Profile) -> Option<f64>,
) -> Option<f64> {
    kernels
        .iter()
        .map(|p| Some(value(p)? * p.duration_ns?))
        .sum::<Option<f64>>()
        .map(|v| v / total_ns)
}

fn micros(ns: f64) -> String {
    format!("{:.2} µs", ns / 1e3)
}

/// The cells of one row after its `#` and `kernel` cells.
fn cells(h: &mut String, values: [String; 8]) {
    for v in values {
        let _ = write!(h, "<td class=\"mono\">{}</td>", esc(&v));
    }
}

/// The kernels side by side: the whole fusion's row first, then each kernel in launch order.
fn kernels_table(h: &mut String, rows: &[KernelRow], primary: bool) {
    let _ = write!(
        h,
        "<table class=\"params\"{}><tr><th>#</th><th>kernel</th>",
        if primary {
            " id=\"profile-kernels\""
        } else {
            ""
        }
    );
    for (name, title) in COLUMNS {
        let _ = write!(h, "<th title=\"{}\">{}</th>", esc(title), esc(name));
    }
    h.push_str("</tr>");
    let profiles: Vec<&Profile> = rows.iter().filter_map(measured).collect();
    let total_ns = (profiles.len() == rows.len())
        .then(|| profiles.iter().map(|p| p.duration_ns).sum::<Option<f64>>())
        .flatten()
        .filter(|t| *t > 0.0);
    h.push_str("<tr class=\"profile-whole\"><td></td>");
    let _ = write!(h, "<td>the {} kernels in order</td>", rows.len());
    match total_ns {
        Some(total) => {
            let mean = |value| weighted(&profiles, total, value);
            cells(
                h,
                [
                    micros(total),
                    "100%".into(),
                    pct(mean(|p| p.dram_throughput_pct)),
                    profiles
                        .iter()
                        .map(|p| p.dram_bytes)
                        .sum::<Option<f64>>()
                        .map_or_else(|| "—".into(), bytes),
                    pct(mean(|p| p.sm_throughput_pct)),
                    pct(mean(|p| p.tensor_pipe_pct)),
                    pct(mean(|p| p.achieved_occupancy_pct)),
                    "—".into(),
                ],
            );
        }
        None => {
            let _ = write!(
                h,
                "<td colspan=\"{}\" class=\"note\">no figures for the whole: not every kernel \
                 has a profile with its duration</td>",
                COLUMNS.len()
            );
        }
    }
    h.push_str("</tr>");
    for (i, row) in rows.iter().enumerate() {
        kernel_row(h, i, row, total_ns);
    }
    h.push_str("</table>");
    h.push_str(
        "<p class=\"note\">The first row is the kernels together: their durations under ncu and \
         DRAM bytes added, their percentages weighted by each kernel's duration. Each section \
         below is one kernel's profile (the longest kernel's is open).</p>",
    );
}

/// One kernel's row: its figures, or why it has no profile.
fn kernel_row(h: &mut String, i: usize, row: &KernelRow, total_ns: Option<f64>) {
    let _ = write!(
        h,
        "<tr class=\"profile-kernel-row\"><td class=\"mono\">{}</td><td class=\"mono\">{}</td>",
        i + 1,
        esc(&row.kernel)
    );
    match &row.profile {
        Some(ProfileReport::Measured { profile: p, .. }) => {
            let top = p.stalls.first().map_or_else(
                || "—".into(),
                |s| {
                    let total = stall_total(p);
                    let share = if total > 0.0 {
                        format!(" {:.0}%", (s.value / total * 100.0).clamp(0.0, 100.0))
                    } else {
                        String::new()
                    };
                    format!("{}{share}", s.reason.replace('_', " "))
                },
            );
            cells(
                h,
                [
                    p.duration_ns.map_or_else(|| "—".into(), micros),
                    match (p.duration_ns, total_ns) {
                        (Some(d), Some(t)) => format!("{:.0}%", d / t * 100.0),
                        _ => "—".into(),
                    },
                    pct(p.dram_throughput_pct),
                    p.dram_bytes.map_or_else(|| "—".into(), bytes),
                    pct(p.sm_throughput_pct),
                    pct(p.tensor_pipe_pct),
                    pct(p.achieved_occupancy_pct),
                    top,
                ],
            );
        }
        Some(ProfileReport::Unavailable { message, .. }) => {
            let _ = write!(
                h,
                "<td colspan=\"{}\" class=\"note\">No profile: {}</td>",
                COLUMNS.len(),
                esc(message)
            );
        }
        None => {
            let _ = write!(
                h,
                "<td colspan=\"{}\" class=\"note\">not profiled: the runner's result carries no \
                 profile for this kernel</td>",
                COLUMNS.len()
            );
        }
    }
    h.push_str("</tr>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// runner/tests/api_fixtures.rs writes them from the runner's own types: col_norm run as
    /// its two kernels, and a profiled one-kernel run (its profile is what each kernel gets).
    const SPLIT: &str = include_str!("../../tests/fixtures/done-split.json");
    const PROFILED: &str = include_str!("../../tests/fixtures/done-profile.json");

    /// The profile report of the profiled fixture, as JSON, for `kernel`.
    fn measured_report(kernel: &str, duration_ns: f64, dram_bytes: f64, dram_pct: f64) -> Value {
        let done: Value = serde_json::from_str(PROFILED).unwrap();
        let mut report = done["result"]["result"]["profile"].clone();
        let p = &mut report["measured"]["profile"];
        p["kernel"] = json!(kernel);
        p["duration_ns"] = json!(duration_ns);
        p["dram_bytes"] = json!(dram_bytes);
        p["dram_throughput_pct"] = json!(dram_pct);
        report
    }

    /// The first kernel's profile: the fixture's own numbers.
    fn first_kernel() -> Value {
        measured_report("col_norm_s1_kernel", 212384.0, 537170176.0, 75.48)
    }

    fn unavailable(reason: &str, message: &str) -> Value {
        json!({"unavailable": {"reason": reason, "message": message}})
    }

    /// The split run's `done` event with these kernels' profiles (None: the kernel has none),
    /// read by the page's reader as the service's answer is.
    fn split_with(profiles: [Option<Value>; 2]) -> KernelsView {
        let mut done: Value = serde_json::from_str(SPLIT).unwrap();
        let kernels = &mut done["result"]["result"]["segments"]["kernels"];
        for (i, p) in profiles.into_iter().enumerate() {
            if let Some(p) = p {
                kernels[i]["profile"] = p;
            }
        }
        let run = crate::runner::parse_result(&done.to_string());
        assert_eq!(run.status, "passed", "{run:?}");
        let m = run.measured.unwrap();
        assert!(
            m.profile.is_none(),
            "a split run's profiles are its kernels'"
        );
        m.kernels.expect("two kernels")
    }

    fn both_profiled() -> KernelsView {
        split_with([
            Some(first_kernel()),
            Some(measured_report(
                "col_norm_s2_kernel",
                424768.0,
                1073741824.0,
                80.0,
            )),
        ])
    }

    /// Text of `html` from `from` to the next `to` (a section of it).
    fn between<'a>(html: &'a str, from: &str, to: &str) -> &'a str {
        let start = html
            .find(from)
            .unwrap_or_else(|| panic!("{from} not in {html}"));
        let rest = &html[start..];
        &rest[..rest.find(to).unwrap_or(rest.len())]
    }

    #[test]
    fn each_kernel_s_profile_is_shown_with_its_name_place_and_reason_the_whole_first() {
        let k = both_profiled();
        let html = kernels_profile_html(&k, true).expect("profiles");
        assert!(html.starts_with("<section class=\"profile profile-kernels\" id=\"profile\">"));
        assert!(html.contains(
            "Profile of each kernel <span class=\"note\">Nsight Compute 2025.3 (hand-written \
             page), each of the 2 kernels alone"
        ));
        // The table: the whole fusion first, then each kernel in launch order.
        let table = between(
            &html,
            "<table class=\"params\" id=\"profile-kernels\">",
            "</table>",
        );
        let whole = between(table, "<tr class=\"profile-whole\">", "</tr>");
        for want in [
            "the 2 kernels in order",
            "637.15 µs",
            "100%",
            "78.5%",
            "1.61 GB",
        ] {
            assert!(
                whole.contains(want),
                "{want} not in the whole's row {whole}"
            );
        }
        let rows: Vec<&str> = table
            .split("<tr class=\"profile-kernel-row\">")
            .skip(1)
            .collect();
        assert_eq!(rows.len(), 2, "{table}");
        for (row, want) in rows.iter().zip([
            ["col_norm_s1_kernel", "212.38 µs", "33%", "75.5%", "537 MB"],
            ["col_norm_s2_kernel", "424.77 µs", "67%", "80.0%", "1.07 GB"],
        ]) {
            for w in want {
                assert!(row.contains(w), "{w} not in {row}");
            }
            // The top stall and its share of the cycles between issues (as the bars).
            assert!(row.contains("long scoreboard 58%"), "{row}");
        }
        assert!(html.find("profile-whole").unwrap() < html.find("profile-kernel-row").unwrap());
        // A section per kernel, labelled; the longest (the second) open.
        let first = between(
            &html,
            "<details class=\"profile-kernel\" id=\"profile-kernel-1\">",
            "</details>",
        );
        assert!(
            first.contains(
                "<summary><span class=\"mono\">kernel 1 of 2: col_norm_s1_kernel</span> <span \
             class=\"note\">outer reduction; ends before `y`: with it, `y` reads the column \
             reductions back"
            ),
            "{first}"
        );
        let second = between(
            &html,
            "<details class=\"profile-kernel\" id=\"profile-kernel-2\" open>",
            "</details>",
        );
        assert!(second.contains("kernel 2 of 2: col_norm_s2_kernel</span> <span class=\"note\">pointwise; the last segment"), "{second}");
        // Each holds what a one-kernel profile shows, its roofline over its own median.
        for section in [first, second] {
            for want in [
                "DRAM throughput",
                "long scoreboard",
                "waiting for data from global or local memory",
                "<svg class=\"roofline\"",
                "over this kernel's median time alone",
            ] {
                assert!(section.contains(want), "{want} not in {section}");
            }
        }
        assert!(first.contains("75.5% of peak · 537 MB moved"));
        assert!(second.contains("80.0% of peak · 1.07 GB moved"));
        // The ids are the section's and the table's, not the one-kernel profile's.
        assert!(!html.contains("id=\"profile-metrics\"") && !html.contains("id=\"roofline\""));
    }

    /// B's copy of an A/B job (or any second result) has no ids.
    #[test]
    fn a_second_result_has_no_ids() {
        let html = kernels_profile_html(&both_profiled(), false).unwrap();
        assert!(!html.contains(" id="), "{html}");
        assert!(html.contains("kernel 2 of 2: col_norm_s2_kernel"));
    }

    #[test]
    fn a_kernel_without_a_profile_says_why_and_the_whole_has_no_figures() {
        let k = split_with([
            Some(first_kernel()),
            Some(unavailable(
                "timed_out",
                "ncu ran past the profile's time limit (<60 s>) and was killed",
            )),
        ]);
        let html = kernels_profile_html(&k, true).unwrap();
        let rows: Vec<&str> = html
            .split("<tr class=\"profile-kernel-row\">")
            .skip(1)
            .collect();
        assert!(
            rows[0].contains("212.38 µs") && rows[0].contains("—"),
            "{}",
            rows[0]
        );
        assert!(
            rows[1].contains(
                "col_norm_s2_kernel</td><td colspan=\"8\" class=\"note\">No profile: ncu ran past \
             the profile's time limit (&lt;60 s&gt;) and was killed"
            ),
            "{}",
            rows[1]
        );
        assert!(html.contains("no figures for the whole: not every kernel has a profile"));
        // Only the profiled kernel has a section, open as the longest profiled.
        assert!(html.contains("id=\"profile-kernel-1\" open>"), "{html}");
        assert!(!html.contains("id=\"profile-kernel-2\""));
    }

    #[test]
    fn a_runner_without_ncu_says_so_once() {
        let no_ncu = "Nsight Compute (ncu) not found on the runner";
        let k = split_with([
            Some(unavailable("no_ncu", no_ncu)),
            Some(unavailable("no_ncu", no_ncu)),
        ]);
        let html = kernels_profile_html(&k, true).unwrap();
        assert_eq!(
            html,
            "<section class=\"profile profile-kernels\" id=\"profile\"><h3>Profile</h3><p \
             class=\"note\" id=\"profile-unavailable\">No profile of any of the 2 kernels: \
             Nsight Compute (ncu) not found on the runner</p></section>"
        );
        // Two reasons: each in its row.
        let k = split_with([
            Some(unavailable("no_ncu", no_ncu)),
            Some(unavailable(
                "no_kernel",
                "ncu profiled no launch of col_norm_s2_kernel",
            )),
        ]);
        let html = kernels_profile_html(&k, true).unwrap();
        assert!(
            html.contains("No profile: Nsight Compute (ncu) not found"),
            "{html}"
        );
        assert!(html.contains("No profile: ncu profiled no launch of col_norm_s2_kernel"));
        assert!(!html.contains("<details"));
    }

    /// Without a profile asked for (the fixtures as recorded) there is nothing to draw; nor for
    /// the fake worker's kernels.
    #[test]
    fn no_profile_asked_draws_nothing() {
        assert!(kernels_profile_html(&split_with([None, None]), true).is_none());
        let fake =
            crate::runner::parse_result(include_str!("../../tests/fixtures/done-split-fake.json"));
        let kernels = fake.fake.unwrap().kernels.unwrap();
        assert_eq!(kernels.rows.len(), 2);
        assert!(kernels_profile_html(&kernels, true).is_none());
        // One kernel profiled, the other's entry absent: its row says so.
        let k = split_with([Some(first_kernel()), None]);
        let html = kernels_profile_html(&k, true).unwrap();
        assert!(
            html.contains("not profiled: the runner's result carries no profile"),
            "{html}"
        );
    }

    /// The runner's own split run profiled kernel by kernel (runner/tests/api_fixtures.rs:
    /// `profile::segment_report` over the hand-written page's metrics) draws as the runs built
    /// above; with the second kernel's ncu past its limit, that kernel's row says so.
    #[test]
    fn the_runner_s_profiled_split_fixtures_draw() {
        let kernels = |fixture: &str| {
            let run = crate::runner::parse_result(fixture);
            run.measured
                .expect("measured")
                .kernels
                .expect("two kernels")
        };
        let both = kernels(include_str!("../../tests/fixtures/done-split-profile.json"));
        let html = kernels_profile_html(&both, true).expect("profiles");
        for want in [
            "<td>the 2 kernels in order</td><td class=\"mono\">637.15 µs</td>",
            "kernel 1 of 2: col_norm_s1_kernel</span> <span class=\"note\">outer reduction",
            "id=\"profile-kernel-2\" open>",
            "kernel 2 of 2: col_norm_s2_kernel</span> <span class=\"note\">pointwise",
            "80.0% of peak · 1.07 GB moved",
        ] {
            assert!(html.contains(want), "{want} not in {html}");
        }
        let partial = kernels(include_str!(
            "../../tests/fixtures/done-split-profile-partial.json"
        ));
        let html = kernels_profile_html(&partial, true).expect("one profile");
        assert!(
            html.contains(
                "col_norm_s2_kernel</td><td colspan=\"8\" class=\"note\">No profile: ncu did \
                 not finish in 60 s (killed)</td>"
            ),
            "{html}"
        );
        assert!(html.contains("id=\"profile-kernel-1\" open>"));
        assert!(!html.contains("id=\"profile-kernel-2\""));
    }

    /// The fake worker's kernels of a run that asked for a profile (each `not_run`, the
    /// runner's worker tests pin the JSON): the reason once, no figure.
    #[test]
    fn the_fake_worker_s_kernels_say_once_why_none_has_a_profile() {
        let why = "fake worker: the kernels were compiled and checked but never ran, so Nsight \
                   Compute had no launch to profile";
        let mut done: Value =
            serde_json::from_str(include_str!("../../tests/fixtures/done-split-fake.json"))
                .unwrap();
        let kernels = done["result"]["compile"]["segments"]["kernels"]
            .as_array_mut()
            .unwrap();
        for k in kernels.iter_mut() {
            k["profile"] = unavailable("not_run", why);
        }
        let run = crate::runner::parse_result(&done.to_string());
        assert!(run.measured.is_none());
        let k = run.fake.unwrap().kernels.unwrap();
        assert_eq!(
            kernels_profile_html(&k, true).unwrap(),
            format!(
                "<section class=\"profile profile-kernels\" id=\"profile\"><h3>Profile</h3><p \
                 class=\"note\" id=\"profile-unavailable\">No profile of any of the 2 kernels: \
                 {why}</p></section>"
            )
        );
    }

    /// Names and reasons from the runner are escaped.
    #[test]
    fn the_runner_s_text_is_escaped() {
        let mut k = both_profiled();
        k.rows[0].kernel = "<k>".into();
        k.rows[0].reason = "a & b".into();
        let html = kernels_profile_html(&k, true).unwrap();
        assert!(html.contains("kernel 1 of 2: &lt;k&gt;"), "{html}");
        assert!(html.contains("outer reduction; a &amp; b"));
        assert!(!html.contains("<k>"));
    }
}
