//! The playground's state in a URL fragment: JSON, raw-deflated, base64url, behind a version
//! tag (`#v1:...`), so a link restores the program (and program B of an A/B comparison), sizes
//! and panes with no server. The browser deflates and inflates (`CompressionStream`, through
//! `js.rs`): a deflater of our own would cost the cold load 13 KiB.
//!
//! Fields added after the first links (`program_b`, `tab`) are optional and left out while they
//! hold their default, so links without them still decode, and a state without B serializes
//! exactly as before (the same JSON, so the same short-link id).

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// The output pane on the right.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pane {
    #[default]
    Cuda,
    Passes,
    Plan,
    Pipeline,
    Run,
    Ptx,
    Sass,
    /// The PyTorch twin (`torch_pane.rs`).
    Torch,
}

/// The editor tab: program A, or program B of an A/B comparison.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tab {
    #[default]
    A,
    B,
}

impl Tab {
    /// The editor's name for the tab's document.
    pub fn key(self) -> &'static str {
        match self {
            Tab::A => "a",
            Tab::B => "b",
        }
    }
    fn is_a(&self) -> bool {
        *self == Tab::A
    }
}

/// How the Passes pane shows the selected pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PassMode {
    #[default]
    Ir,
    Diff,
}

/// Everything a link restores.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct State {
    pub program: String,
    #[serde(default)]
    pub sizes: BTreeMap<String, i64>,
    /// Values typed for scalar inputs (`input eps: f32`), by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scalars: BTreeMap<String, f64>,
    #[serde(default)]
    pub pane: Pane,
    /// The pass selected in the Passes pane (by name).
    #[serde(default)]
    pub pass: Option<String>,
    #[serde(default)]
    pub pass_mode: PassMode,
    #[serde(default = "default_iters")]
    pub iters: u32,
    #[serde(default)]
    pub seed: u64,
    /// Program B (tab B); None: no A/B comparison.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_b: Option<String>,
    /// The tab in the editor (B only when there is a program B).
    #[serde(default, skip_serializing_if = "Tab::is_a")]
    pub tab: Tab,
}

pub fn default_iters() -> u32 {
    100
}

impl State {
    /// The state a link's JSON holds (what `Serialize` writes; a missing optional field takes
    /// its default). Read field by field, so the page carries no serde reader for it.
    pub fn read(v: &Value) -> Result<State, String> {
        let o = v.as_object().ok_or("not a JSON object")?;
        let wrong = |k: &str| format!("`{k}` has the wrong type");
        let opt = |k: &str| o.get(k).filter(|v| !v.is_null());
        let text = |k: &str| -> Result<Option<String>, String> {
            opt(k)
                .map(|v| v.as_str().map(String::from).ok_or_else(|| wrong(k)))
                .transpose()
        };
        let program = text("program")?.ok_or("missing field `program`")?;
        let mut sizes = BTreeMap::new();
        if let Some(m) = opt("sizes") {
            for (name, n) in m.as_object().ok_or_else(|| wrong("sizes"))? {
                sizes.insert(name.clone(), n.as_i64().ok_or_else(|| wrong("sizes"))?);
            }
        }
        let mut scalars = BTreeMap::new();
        if let Some(m) = opt("scalars") {
            for (name, v) in m.as_object().ok_or_else(|| wrong("scalars"))? {
                scalars.insert(name.clone(), v.as_f64().ok_or_else(|| wrong("scalars"))?);
            }
        }
        let pane = match text("pane")?.as_deref() {
            None | Some("cuda") => Pane::Cuda,
            Some("passes") => Pane::Passes,
            Some("plan") => Pane::Plan,
            Some("pipeline") => Pane::Pipeline,
            Some("run") => Pane::Run,
            Some("ptx") => Pane::Ptx,
            Some("sass") => Pane::Sass,
            Some("torch") => Pane::Torch,
            Some(other) => return Err(format!("unknown pane `{other}`")),
        };
        let pass_mode = match text("pass_mode")?.as_deref() {
            None | Some("ir") => PassMode::Ir,
            Some("diff") => PassMode::Diff,
            Some(other) => return Err(format!("unknown pass mode `{other}`")),
        };
        let tab = match text("tab")?.as_deref() {
            None | Some("a") => Tab::A,
            Some("b") => Tab::B,
            Some(other) => return Err(format!("unknown tab `{other}`")),
        };
        let number = |k: &str| {
            opt(k)
                .map(|v| v.as_u64().ok_or_else(|| wrong(k)))
                .transpose()
        };
        Ok(State {
            program,
            sizes,
            scalars,
            pane,
            pass: text("pass")?,
            pass_mode,
            iters: number("iters")?.map_or(default_iters(), |n| n as u32),
            seed: number("seed")?.unwrap_or(0),
            program_b: text("program_b")?,
            tab,
        })
    }
}

/// The version tag of [`encode`]'s output.
pub const V1: &str = "v1:";

/// The most bytes a link's state may inflate to.
pub const MAX_STATE_BYTES: u32 = 4 << 20;

/// `v1:` + base64url(raw deflate(JSON)).
pub async fn encode(state: &State) -> String {
    let deflated = crate::js::deflate_raw(&json_of(state)).await;
    fragment_of(&js_sys::Uint8Array::new(&deflated).to_vec())
}

/// The inverse of [`encode`]; accepts a leading `#`.
pub async fn decode(fragment: &str) -> Result<State, String> {
    let deflated = deflated_of(fragment)?;
    let json = crate::js::inflate_raw(&deflated, MAX_STATE_BYTES)
        .await
        .map_err(|_| "the link is damaged (cannot inflate)".to_string())?;
    state_of_json(js_sys::Uint8Array::new(&json).to_vec())
}

/// What [`encode`] deflates.
pub fn json_of(state: &State) -> Vec<u8> {
    serde_json::to_vec(state).expect("state serializes")
}

/// `v1:` + base64url(`deflated`).
pub fn fragment_of(deflated: &[u8]) -> String {
    format!("{V1}{}", base64url_encode(deflated))
}

/// The deflated JSON of a fragment (a leading `#` is fine), after its version tag.
pub fn deflated_of(fragment: &str) -> Result<Vec<u8>, String> {
    let f = fragment.strip_prefix('#').unwrap_or(fragment);
    let Some(body) = f.strip_prefix(V1) else {
        let version = f.split(':').next().unwrap_or("");
        return Err(format!(
            "this link's state has an unknown version `{version}` (this playground reads v1)"
        ));
    };
    base64url_decode(body).ok_or_else(|| "the link is damaged (not base64url)".to_string())
}

/// The state of an inflated fragment.
pub fn state_of_json(json: Vec<u8>) -> Result<State, String> {
    let json = String::from_utf8(json).map_err(|_| "the link is damaged (not UTF-8)")?;
    let value: Value =
        serde_json::from_str(&json).map_err(|e| format!("the link is damaged ({e})"))?;
    State::read(&value).map_err(|e| format!("the link is damaged ({e})"))
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Base64 with the URL alphabet and no padding.
pub fn base64url_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

pub fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        acc = acc << 6 | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The browser's deflate is not here: the tests deflate and inflate with miniz_oxide (raw
    // deflate, the format `CompressionStream("deflate-raw")` writes and reads); the browser
    // test opens a link the page wrote.
    fn encode(state: &State) -> String {
        fragment_of(&miniz_oxide::deflate::compress_to_vec(&json_of(state), 9))
    }

    fn decode(fragment: &str) -> Result<State, String> {
        let deflated = deflated_of(fragment)?;
        let json =
            miniz_oxide::inflate::decompress_to_vec_with_limit(&deflated, MAX_STATE_BYTES as usize)
                .map_err(|_| "the link is damaged (cannot inflate)".to_string())?;
        state_of_json(json)
    }

    #[test]
    fn base64url_round_trips() {
        for n in 0..40 {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            let s = base64url_encode(&bytes);
            assert!(!s.contains(['+', '/', '=']));
            assert_eq!(base64url_decode(&s).unwrap(), bytes);
        }
        assert_eq!(base64url_encode(b"hello"), "aGVsbG8");
    }

    #[test]
    fn state_round_trips_and_versions_are_checked() {
        let state = State {
            program: "fusion f { // ü\n}".into(),
            sizes: [("M".to_string(), 1024), ("N".to_string(), 7)].into(),
            scalars: [("eps".to_string(), 1e-6), ("k".to_string(), -3.0)].into(),
            pane: Pane::Passes,
            pass: Some("indexing".into()),
            pass_mode: PassMode::Diff,
            iters: 20,
            seed: 3,
            program_b: None,
            tab: Tab::A,
        };
        let link = encode(&state);
        assert!(link.starts_with("v1:"));
        assert_eq!(decode(&format!("#{link}")).unwrap(), state);
        assert!(decode("v9:abc").unwrap_err().contains("v9"));
        assert!(decode("v1:!!").is_err());
        assert!(decode("v1:AAAA").is_err());
    }

    #[test]
    fn program_b_and_the_tab_round_trip() {
        let state = State {
            program: "fusion a {}\n".into(),
            program_b: Some("fusion b {}\n".into()),
            tab: Tab::B,
            pane: Pane::Pipeline,
            iters: 10,
            ..Default::default()
        };
        let decoded = decode(&encode(&state)).unwrap();
        assert_eq!(decoded, state);
        assert_eq!(decoded.program_b.as_deref(), Some("fusion b {}\n"));
        let json = serde_json::to_value(&state).unwrap();
        assert_eq!(
            (&json["program_b"], &json["tab"], &json["pane"]),
            (
                &serde_json::json!("fusion b {}\n"),
                &serde_json::json!("b"),
                &serde_json::json!("pipeline")
            )
        );
    }

    /// A fragment written by the playground before tab B existed (with its JSON).
    const OLD_FRAGMENT: &str = "#v1:LYxbCsMgEEW3MsxXC_kIfUGEbiEbaEoRHMNAMkqMYCruvQr9vOceTka_uXnTKyq0MbATcIuBPAkAi487JAX2enmN74YOeAIlf0rntlzcm3FMUibBDgN_KaDKOKK69cOjdOi1UE37RTfB61B_ZDGUWOY_-azONMmwtRXxTlu17n0NEhlUQ_kB";
    const OLD_JSON: &str = r#"{"program":"fusion old {\n  input x: f32[N]\n  y = exp(x)\n  output y\n}\n","sizes":{"N":4096},"pane":"plan","pass":"indexing","pass_mode":"diff","iters":50,"seed":9}"#;

    #[test]
    fn old_links_without_b_still_open_and_encode_the_same() {
        let old = decode(OLD_FRAGMENT).unwrap();
        assert_eq!(
            old.program,
            "fusion old {\n  input x: f32[N]\n  y = exp(x)\n  output y\n}\n"
        );
        assert_eq!(old.sizes, [("N".to_string(), 4096)].into());
        assert_eq!((old.pane, old.pass_mode), (Pane::Plan, PassMode::Diff));
        assert_eq!((old.iters, old.seed), (50, 9));
        assert_eq!((old.program_b, old.tab), (None, Tab::A));
        // Without B the state serializes as before: the same JSON, the same short-link id.
        let old = decode(OLD_FRAGMENT).unwrap();
        assert_eq!(serde_json::to_string(&old).unwrap(), OLD_JSON);
        assert_eq!(json_of(&old), OLD_JSON.as_bytes());
    }
}

#[cfg(test)]
mod read_tests {
    use super::*;

    #[test]
    fn a_state_reads_back_what_it_writes_and_defaults_what_is_missing() {
        let mut s = State {
            program: "fusion f {}".into(),
            pane: Pane::Pipeline,
            pass: Some("tma".into()),
            pass_mode: PassMode::Diff,
            iters: 7,
            seed: 3,
            program_b: Some("fusion g {}".into()),
            tab: Tab::B,
            ..State::default()
        };
        s.sizes.insert("M".into(), 4096);
        s.scalars.insert("eps".into(), 0.25);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["scalars"]["eps"], 0.25);
        assert_eq!(State::read(&v).unwrap(), s);
        let minimal = State::read(&serde_json::json!({"program": "p"})).unwrap();
        assert_eq!(
            (minimal.pane, minimal.tab, minimal.iters, minimal.seed),
            (Pane::Cuda, Tab::A, 100, 0)
        );
        assert!(State::read(&serde_json::json!({}))
            .unwrap_err()
            .contains("`program`"));
        let e = State::read(&serde_json::json!({"program": "p", "pane": "nope"})).unwrap_err();
        assert!(e.contains("unknown pane `nope`"), "{e}");
        let e = State::read(&serde_json::json!({"program": "p", "iters": "x"})).unwrap_err();
        assert!(e.contains("`iters` has the wrong type"), "{e}");
    }
}
