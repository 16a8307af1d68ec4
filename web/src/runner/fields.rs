//! The accessor layer: the playground's reading of the service's answers (`api::job::JobResult`
//! with its `api::run::RunResult`, docs/api.md, and the health, inspect, run and link answers),
//! pulled field by field out of the parsed JSON instead of through serde's derived readers: those
//! are monomorphised for every one of the ~45 nested types and cost the page's wasm tens of KiB
//! (the cold-load budget, scripts/test-web.sh). Every field named with it is one the service
//! writes; the tests read the recorded `done` events (web/tests/fixtures, docs/recordings), so a
//! renamed or retyped field fails them; the profile is built into the runner's own
//! `ProfileReport` (its pane draws it with the runner's code) and a test compares that with
//! serde's reading of the same JSON.

use serde_json::Value;

/// Why a job result could not be read.
pub(super) type Read<T> = Result<T, String>;

/// One JSON object of a job result, read by field name.
#[derive(Clone, Copy)]
pub(super) struct Fields<'a>(pub(super) &'a serde_json::Map<String, Value>);

impl<'a> Fields<'a> {
    pub(super) fn of(v: &'a Value, what: &str) -> Read<Fields<'a>> {
        v.as_object()
            .map(Fields)
            .ok_or_else(|| format!("`{what}` is not an object"))
    }
    /// A field that may be missing or null.
    pub(super) fn opt<T>(self, k: &str, read: impl Fn(&'a Value) -> Option<T>) -> Read<Option<T>> {
        match self.0.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => read(v)
                .map(Some)
                .ok_or_else(|| format!("`{k}` has the wrong type")),
        }
    }
    /// A field that must be there.
    pub(super) fn req<T>(self, k: &str, read: impl Fn(&'a Value) -> Option<T>) -> Read<T> {
        self.opt(k, read)?
            .ok_or_else(|| format!("missing field `{k}`"))
    }
    pub(super) fn str(self, k: &str) -> Read<&'a str> {
        self.req(k, Value::as_str)
    }
    pub(super) fn f64(self, k: &str) -> Read<f64> {
        self.req(k, Value::as_f64)
    }
    pub(super) fn u64(self, k: &str) -> Read<u64> {
        self.req(k, Value::as_u64)
    }
    pub(super) fn bool(self, k: &str) -> Read<bool> {
        self.req(k, Value::as_bool)
    }
    pub(super) fn list(self, k: &str) -> Read<&'a [Value]> {
        self.req(k, |v| v.as_array().map(Vec::as_slice))
    }
    pub(super) fn obj(self, k: &str) -> Read<Fields<'a>> {
        self.req(k, |v| v.as_object().map(Fields))
    }
    pub(super) fn opt_obj(self, k: &str) -> Read<Option<Fields<'a>>> {
        self.opt(k, |v| v.as_object().map(Fields))
    }
    pub(super) fn opt_str(self, k: &str) -> Read<Option<String>> {
        self.opt(k, |v| v.as_str().map(String::from))
    }
    pub(super) fn opt_f64(self, k: &str) -> Read<Option<f64>> {
        self.opt(k, Value::as_f64)
    }
}
