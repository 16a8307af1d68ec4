//! What surrounds the editor: tabs A and B ("+ B" opens B with a copy of A), the size boxes of
//! the program's symbols (whole numbers >= 1, or why not), a field per scalar input (a finite
//! number, empty for the program's value; sent with Run), the Problems list (click one to go
//! there) and the splitter between the editor and the panes.

use super::{Ui, DEFAULT_SIZE};
use crate::model;
use crate::share::Tab;
use leptos::ev;
use leptos::html;
use leptos::prelude::*;

/// Tabs A and B above the editor: "+ B" opens B with a copy of A, × closes it.
#[component]
pub(super) fn EditorTabs(ui: Ui) -> impl IntoView {
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
                        <span class="spacer"></span>
                    }
                    .into_any()
                }
            }}
            <button id="format" class="link" title="Format the program: indentation and spacing, comments kept (Shift+Alt+F)" on:click=move |_| ui.format()>
                "Format"
            </button>
        </nav>
    }
}

/// One size box: takes whole numbers ≥ 1; anything else stays in the box, marked, with the
/// reason (the plan keeps the last valid value meanwhile).
#[component]
pub(super) fn SizeBox(ui: Ui, sym: String) -> impl IntoView {
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

/// One scalar-input field (`input eps: f32 = 1e-6`): empty shows the program's value (or that
/// a run draws one); a number typed is sent with Run; anything else stays, marked, with why.
#[component]
pub(super) fn ScalarBox(ui: Ui, input: crate::scalar_inputs::ScalarInput) -> impl IntoView {
    let default = input.default_text();
    let crate::scalar_inputs::ScalarInput { name, dtype, .. } = input;
    let error = RwSignal::new(None::<(String, String)>);
    let (n1, n2) = (name.clone(), name.clone());
    let placeholder = default.clone().unwrap_or_else(|| "seeded".to_string());
    let what = match default {
        Some(v) => format!("the scalar input {name}: {dtype} (the program's value: {v})"),
        None => format!("the scalar input {name}: {dtype} (empty: a run draws it from the seed)"),
    };
    view! {
        <label class="size scalar" class:invalid=move || error.with(Option::is_some)>
            {name.clone()}
            "="
            <input
                type="text"
                inputmode="decimal"
                size="8"
                data-scalar=name.clone()
                placeholder=placeholder
                aria-invalid=move || error.with(Option::is_some).to_string()
                title=move || error.get().map(|(_, why)| why).unwrap_or_else(|| what.clone())
                prop:value=move || match error.get() {
                    Some((text, _)) => text,
                    None => ui.scalars.with(|s| s.get(&n1).map(|v| v.to_string()).unwrap_or_default()),
                }
                on:change=move |ev| {
                    let text = event_target_value(&ev);
                    match crate::scalar_inputs::parse(&text) {
                        Ok(v) => {
                            error.set(None);
                            ui.scalars.update(|s| match v {
                                Some(v) => {
                                    s.insert(n2.clone(), v);
                                }
                                None => {
                                    s.remove(&n2);
                                }
                            });
                        }
                        Err(why) => error.set(Some((text.trim().to_string(), why))),
                    }
                }
            />
            {move || error.get().map(|(_, why)| view! { <span class="size-error" role="alert">{why}</span> })}
        </label>
    }
}

/// Every diagnostic of the program shown, under the editor: click one to go there.
#[component]
pub(super) fn Problems(ui: Ui) -> impl IntoView {
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

/// The bar between the editor and the panes: drag it (or use the arrow keys on it).
#[component]
pub(super) fn Splitter(ui: Ui, main_ref: NodeRef<html::Main>) -> impl IntoView {
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
