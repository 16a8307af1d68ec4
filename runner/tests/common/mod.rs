//! What the command-line tests share (`mod common;` in cli.rs, export.rs and inspect.rs): the
//! `hopfuse` binary run in the workspace root (so `examples/...` paths name the examples), and
//! its output read as one text.

use std::path::PathBuf;
use std::process::{Command, Output};

/// The workspace's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `hopfuse ARGS` in the workspace root to its end.
pub fn hopfuse(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hopfuse"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run hopfuse")
}

/// Its stdout, then its stderr.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
