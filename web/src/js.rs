//! Bindings to `js/editor.js` (bundled next to the generated glue as `dist/editor.js`).

use wasm_bindgen::prelude::*;

#[wasm_bindgen(raw_module = "./editor.js")]
extern "C" {
    /// The program editor (CodeMirror 6 with the fusion language mode, lint marks, completion
    /// and hover docs from the language reference, fetched on first use). `on_change(text)` runs at once after an edit while
    /// compiles are fast, else after a delay of at most `max_delay_ms`.
    pub type FusionEditor;
    #[wasm_bindgen(constructor)]
    pub fn new(
        parent: &web_sys::HtmlElement,
        doc: &str,
        max_delay_ms: u32,
        on_change: &JsValue,
        on_shortcut: &JsValue,
    ) -> FusionEditor;
    /// Puts the cursor at a UTF-16 offset, scrolls to it and focuses the editor.
    #[wasm_bindgen(method)]
    pub fn goto(this: &FusionEditor, offset: u32);
    #[wasm_bindgen(method)]
    pub fn text(this: &FusionEditor) -> String;
    #[wasm_bindgen(method, js_name = setText)]
    pub fn set_text(this: &FusionEditor, text: &str);
    #[wasm_bindgen(method, js_name = setDiagnostics)]
    pub fn set_diagnostics(this: &FusionEditor, json: &str);
    #[wasm_bindgen(method)]
    pub fn focus(this: &FusionEditor);
    /// Shows tab `key`'s document holding `text` (the tab's own undo history when it still
    /// holds `text`).
    #[wasm_bindgen(method, js_name = switchTo)]
    pub fn switch_to(this: &FusionEditor, key: &str, text: &str);
    /// Forgets a closed tab's document.
    #[wasm_bindgen(method)]
    pub fn forget(this: &FusionEditor, key: &str);

    /// A read-only CodeMirror: "cpp" highlights CUDA (and folds the helpers before the kernel),
    /// "ir" the kernel IR, "fusion" a program.
    pub type CodeViewer;
    #[wasm_bindgen(constructor)]
    pub fn new(parent: &web_sys::HtmlElement, lang: &str) -> CodeViewer;
    #[wasm_bindgen(method, js_name = setText)]
    pub fn set_text(this: &CodeViewer, text: &str);
    #[wasm_bindgen(method, js_name = setWrap)]
    pub fn set_wrap(this: &CodeViewer, wrap: bool);

    /// `{status, body}` ([`HttpAnswer`]) for any HTTP answer; an error string when nothing
    /// answered.
    #[wasm_bindgen(js_name = apiRequest, catch)]
    pub async fn api_request(
        method: &str,
        url: &str,
        token: &str,
        body: Option<String>,
        timeout_ms: u32,
    ) -> Result<JsValue, JsValue>;

    /// What `apiRequest` resolves to: the HTTP status and the body's text.
    pub type HttpAnswer;
    #[wasm_bindgen(method, getter)]
    pub fn status(this: &HttpAnswer) -> f64;
    #[wasm_bindgen(method, getter)]
    pub fn body(this: &HttpAnswer) -> Option<String>;

    /// Server-sent events read from a fetch body.
    pub type EventStream;
    #[wasm_bindgen(constructor)]
    pub fn new(url: &str, token: &str, on_event: &JsValue) -> EventStream;
    #[wasm_bindgen(method)]
    pub fn done(this: &EventStream) -> js_sys::Promise;
    #[wasm_bindgen(method)]
    pub fn cancel(this: &EventStream);

    #[wasm_bindgen(js_name = copyText)]
    pub async fn copy_text(text: &str) -> JsValue;
    /// The share link's raw deflate, by the browser (`CompressionStream`): a `Uint8Array`.
    #[wasm_bindgen(js_name = deflateRaw)]
    pub async fn deflate_raw(bytes: &[u8]) -> JsValue;
    /// Its inverse; fails on damaged data or past `limit` bytes.
    #[wasm_bindgen(js_name = inflateRaw, catch)]
    pub async fn inflate_raw(bytes: &[u8], limit: u32) -> Result<JsValue, JsValue>;
    pub fn download(name: &str, text: &str, mime: &str);
    /// Fills `el` with the language reference's tables (`reference.json`, fetched once), or a
    /// line saying why it could not be fetched.
    #[wasm_bindgen(js_name = fillReference)]
    pub fn fill_reference(el: &web_sys::HtmlElement);
}
