//! The output panes but Run: what each [`Pane`] shows ([`pane_body`], the same in the
//! playground and the embed view), their tabs, and the CUDA, Passes (the IR after every pass,
//! or its diff with the previous one), Launch plan (evaluated with the sizes, its constraints
//! checked) and Pipeline panes; PyTorch, PTX and SASS are drawn by their own modules. A
//! program without a schedule gets a line in the CUDA and Run panes and a section in the Launch
//! plan pane on its automatic schedule (`auto_line::AutoScheduleLine`), with "Insert schedule".

use super::auto_line::AutoScheduleLine;
use super::run_pane::RunPane;
use super::{pane_key, Ui, WRAP_KEY};
use crate::diff;
use crate::inspect_panes::{self, Asm, InspectPane};
use crate::js;
use crate::model;
use crate::pipeline;
use crate::share::{Pane, PassMode};
use leptos::html;
use leptos::prelude::*;

/// What a pane shows (the same in the playground and in the embed view).
/// `inspector` is the PTX/SASS panes' shared request state (the embed view has none: those panes
/// are not embeddable).
pub(super) fn pane_body(
    ui: Ui,
    pane: Pane,
    inspector: Option<inspect_panes::Inspector>,
) -> AnyView {
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
                sizes=Signal::derive(move || ui.sizes.get())
                stale=Signal::derive(move || ui.diags.with(|d| !d.is_empty()))
                copy=Callback::new(move |t| ui.copy(t, "PyTorch twin"))
            />
        }
        .into_any(),
    }
}

#[component]
pub(super) fn PaneTab(ui: Ui, pane: Pane, label: &'static str) -> impl IntoView {
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
        <AutoScheduleLine ui=ui id="cuda-auto" />
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
        let p = &c.plan;
        let sizes = model::plan_sizes(p, &ui.sizes.get());
        let dims = |d: &[hopfuse::plan::SizeExpr; 3]| {
            d.iter()
                .map(|e| model::expr_row(e, &sizes))
                .collect::<Vec<_>>()
                .join("  ×  ")
        };
        let sizes_text = p
            .symbols
            .iter()
            .map(|s| format!("{s}={}", sizes[s]))
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
        let schedule_text = p
            .auto_schedule
            .as_ref()
            .and_then(|n| n.schedule.clone())
            .map(|text| {
                view! {
                    <h3>"Automatic schedule"</h3>
                    <pre class="mono auto-schedule-text" id="plan-auto-text">{text}</pre>
                }
            });
        view! {
            <div class="plan">
                <AutoScheduleLine ui=ui id="plan-auto" />
                {schedule_text}
                <p class="note">{format!("Values with {sizes_text}.")}</p>
                <table class="kv">
                    <tr><th>"kernel"</th><td class="mono">{p.kernel_name.clone()}</td></tr>
                    <tr><th>"index type"</th><td id="plan-index">
                        <span class="mono">{p.index_type.cuda()}</span>
                        {format!(" ({}: the variant Run and the SASS pane build)", c.index_reason)}
                    </td></tr>
                    <tr><th>"grid"</th><td class="mono" id="plan-grid">{dims(&p.grid)}</td></tr>
                    <tr><th>"block"</th><td class="mono" id="plan-block">{dims(&p.block)}</td></tr>
                    <tr><th>"cluster"</th><td class="mono" id="plan-cluster">{p.cluster.map_or_else(|| "none".to_string(), |c| format!("{} × {} × {} CTAs (__cluster_dims__)", c[0], c[1], c[2]))}</td></tr>
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

/// The diagram of every pipeline of the compiled kernel, with its loads, waits and release:
/// fitted to the pane's width at first, zoomed with the tools (then it scrolls).
#[component]
fn PipelinePane(ui: Ui) -> impl IntoView {
    // The diagram's scale; 0: fit to the pane.
    let zoom = RwSignal::new(0.0f64);
    let step = move |factor: f64| {
        zoom.update(|z| *z = ((if *z == 0.0 { 1.0 } else { *z }) * factor).clamp(0.25, 4.0))
    };
    view! {
        <div class="pane-tools">
            <span class="stale" class:hidden=move || ui.diags.with(|d| d.is_empty())>
                "last successful compile (the program has errors)"
            </span>
            <span class="spacer"></span>
            <span class="note" id="pl-zoom-level">
                {move || {
                    let z = zoom.get();
                    if z == 0.0 { "fitted to the pane".to_string() } else { format!("{:.0}%", z * 100.0) }
                }}
            </span>
            <button id="pl-fit" title="Fit the diagram to the pane's width" class:active=move || zoom.get() == 0.0 on:click=move |_| zoom.set(0.0)>"Fit"</button>
            <button id="pl-zoom-out" title="Zoom out" on:click=move |_| step(0.8)>"−"</button>
            <button id="pl-zoom-in" title="Zoom in" on:click=move |_| step(1.25)>"+"</button>
            <button id="pl-actual" title="Actual size" on:click=move |_| zoom.set(1.0)>"100%"</button>
        </div>
        <div
            class="viewer scroll pl-body"
            class:fit=move || zoom.get() == 0.0
            style=move || format!("--pl-zoom: {}", zoom.get())
            inner_html=move || ui.compiled.with(|c| c.as_ref().map(|c| pipeline::html(&c.pipeline)))
        ></div>
    }
}
