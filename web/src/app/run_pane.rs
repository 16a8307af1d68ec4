//! The Run pane: iterations, seed, the torch and profile toggles, Run and the runner's line;
//! the Tune section (`tune.rs`) while a tune runs or after one;
//! a job's stages while it is followed; and a finished job's result ([`RunView`]) by status: a
//! measurement (time, rate against the copy ceiling or cuBLAS, validation, resources, peers,
//! profile; a fusion run as several kernels, a row per kernel and each kernel's profile), what
//! the fake worker checked (never a number, a split fusion's kernels as compiled), or what went
//! wrong; an A/B job shows B/A with its spread and both results.

use super::{RunState, RunnerStatus, Ui};
use crate::model;
use crate::runner::{self, RunView};
use leptos::prelude::*;
use std::sync::Arc;

fn fmt_opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| "—".into())
}

#[component]
pub(super) fn RunPane(ui: Ui) -> impl IntoView {
    let stages = ["queued", "compiling", "running", "validating", "done"];
    view! {
        <div class="run">
            <super::auto_line::AutoScheduleLine ui=ui id="run-auto" />
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
            <super::tune::TuneSection ui=ui />
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

/// A fusion run as several kernels: why, a row per kernel in order (its time alone when it
/// was measured) and the tensors between them.
fn kernels_table(k: &runner::KernelsView, primary: bool) -> impl IntoView + use<> {
    let measured = k.rows.iter().any(|r| r.median_us.is_some());
    let rows = k
        .rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let time = measured.then(|| {
                view! {
                    <td class="mono">{fmt_opt(r.median_us, |x| format!("{x:.2} µs"))}</td>
                    <td class="mono">{fmt_opt(r.gbps, |g| format!("{g:.0} GB/s"))}</td>
                }
            });
            view! {
                <tr class="kernel-row">
                    <td class="mono">{(i + 1).to_string()}</td>
                    <td class="mono">{r.kernel.clone()}</td>
                    <td>{r.scheduler.clone()}</td>
                    <td class="mono">{r.launch.clone()}</td>
                    {time}
                    <td>{r.reason.clone()}</td>
                </tr>
            }
        })
        .collect_view();
    let head = measured.then(|| view! { <th>"median alone"</th><th>"bandwidth"</th> });
    let between = (!k.intermediates.is_empty()).then(|| {
        view! { <p class="note">"Between the kernels, in global memory: "{k.intermediates.join("; ")}"."</p> }
    });
    view! {
        <section class="run-kernels" id=primary.then_some("run-kernels")>
            <h3>{format!("{} kernels, in order", k.rows.len())}</h3>
            <p class="note">
                {format!(
                    "No scheduler takes this fusion whole ({}){}",
                    k.reason.trim_end_matches('.'),
                    if measured {
                        ": the times above are of every kernel launched in order; each row is its kernel timed alone."
                    } else {
                        "."
                    }
                )}
            </p>
            <table class="params">
                <tr><th>"#"</th><th>"kernel"</th><th>"scheduler"</th><th>"launch"</th>{head}<th>"why it ends there"</th></tr>
                {rows}
            </table>
            {between}
        </section>
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
                        model::sentence(&fk.note)
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
                {fk.kernels.as_ref().map(|k| kernels_table(k, primary))}
                // A profile asked for: each kernel's reason for having none (never a figure).
                {fk.kernels
                    .as_ref()
                    .and_then(|k| crate::profile_view::kernels_profile_html(k, primary))
                    .map(|h| view! { <div inner_html=h></div> })}
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
    let warnings = m.warnings.clone();
    view! {
        {message.map(|msg| view! { <p class="note">{msg}</p> })}
        {warnings.into_iter().map(|w| view! { <p class="note run-warning">"⚠ "{w}</p> }).collect::<Vec<_>>()}
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
            {m.waves.clone().map(|w| view! { <tr><th>"waves"</th><td class="mono">{w}</td></tr> })}
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
        {m.kernels.as_ref().map(|k| kernels_table(k, primary))}
        <h3>"Validation against the float64 reference"</h3>
        {checks_table(&m.checks)}
        {after}
        {m.profile.as_ref().map(|p| view! { <div inner_html=crate::profile_view::profile_html(p, primary)></div> })}
        {m.kernels
            .as_ref()
            .and_then(|k| crate::profile_view::kernels_profile_html(k, primary))
            .map(|h| view! { <div inner_html=h></div> })}
    }
}
