//! The hopfuse playground: a Leptos (client-side rendered) page that links the compiler and
//! lowers the program in the page on every edit. Built by `scripts/build-web.sh` into `dist/`
//! (the `wasm-release` profile, `--cfg erase_components`, wasm-bindgen from `tools/wasm-bindgen`,
//! wasm-opt; the script says each step and why), with `web/js/editor.js` (CodeMirror) bundled
//! next to it and imported as `./editor.js` (`js.rs`).
//!
//! Sizes are watched in the code too (the cold-load budget is `scripts/test-web.sh`'s): a
//! `collect` into a `BTreeMap` or a `sort` links a copy of the standard library's sort per
//! element and closure type (about 1 KiB of brotli each), so the page builds its maps by
//! insertion (`model::sizes_of`), keeps short lists sorted by binary search, and the compiler's
//! small orderings share one sort, `hopfuse::id::sort_by_position`. The language reference
//! (`reference.json`) and the examples' texts are fetched when first needed, not built in.

pub mod app;
pub mod auto_note;
pub mod diff;
pub mod example_meta;
pub mod examples;
pub mod format;
pub mod inspect_panes;
pub mod js;
pub mod model;
pub mod pipeline;
pub mod profile_view;
pub mod python_snippet;
pub mod reference;
pub mod runner;
pub mod scalar_inputs;
pub mod share;
pub mod torch_pane;

use wasm_bindgen::prelude::*;

/// A value from localStorage (None when storage is unavailable).
pub fn storage_get(key: &str) -> Option<String> {
    web_sys::window()?
        .local_storage()
        .ok()??
        .get_item(key)
        .ok()?
}

pub fn storage_set(key: &str, value: &str) {
    if let Some(s) = web_sys::window().and_then(|w| w.local_storage().ok().flatten()) {
        let _ = s.set_item(key, value);
    }
}

#[wasm_bindgen(start)]
pub fn start() {
    leptos::mount::mount_to_body(app::App);
}
