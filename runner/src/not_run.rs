//! One policy for checks that cannot run on this machine (no libnvrtc, no PostgreSQL or
//! nats-server to test against): a check that did not run says so, as `NOT RUN: <check>: <why>`
//! on stderr and as a line in the file named by `HOPFUSE_NOT_RUN_LOG` (scripts/test.sh prints
//! that file at the end), and where the variable that requires it is set
//! (`HOPFUSE_REQUIRE_NVRTC`, `HOPFUSE_REQUIRE_POSTGRES`, `HOPFUSE_REQUIRE_NATS`), it fails
//! instead. A check that ran and failed always fails. Tests that need no GPU hide it
//! (`CUDA_VISIBLE_DEVICES=`) rather than skip, so they run the same on a GPU machine.

use std::io::Write;
use std::path::Path;

/// Requires the NVRTC checks (scripts/test.sh sets it).
pub const REQUIRE_NVRTC: &str = "HOPFUSE_REQUIRE_NVRTC";
/// Requires the PostgreSQL checks.
pub const REQUIRE_POSTGRES: &str = "HOPFUSE_REQUIRE_POSTGRES";
/// Requires the distributed-mode checks (a `nats-server` to start).
pub const REQUIRE_NATS: &str = "HOPFUSE_REQUIRE_NATS";
/// A file to append one line per check that did not run.
pub const LOG: &str = "HOPFUSE_NOT_RUN_LOG";

/// Reports that `check` did not run because of `why` and returns `true` (the caller returns);
/// panics instead when `required_by` is set in the environment.
pub fn skip(check: &str, why: &str, required_by: &str) -> bool {
    let log = std::env::var_os(LOG).filter(|p| !p.is_empty());
    skip_logging_to(check, why, required_by, log.as_deref().map(Path::new))
}

/// [`skip`] with the file to append the line to given (`None`: stderr only), so that the
/// policy's own test leaves the suite's list of checks not run alone.
fn skip_logging_to(check: &str, why: &str, required_by: &str, log: Option<&Path>) -> bool {
    if std::env::var_os(required_by).is_some_and(|v| !v.is_empty()) {
        panic!("{check} did not run ({why}), and {required_by} is set: it is required here");
    }
    let line = format!("NOT RUN: {check}: {why} (set {required_by} to make this a failure)");
    eprintln!("{line}");
    if let Some(path) = log {
        // Best effort: the line on stderr is the report of record.
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
    true
}

/// Whether `check`, which needs libnvrtc, must be skipped (see [`skip`]).
pub fn nvrtc_missing(check: &str) -> bool {
    !crate::nvrtc::available()
        && skip(
            check,
            "libnvrtc (CUDA 13) cannot be loaded; run `eval \"$(scripts/setup-nvrtc.sh)\"`",
            REQUIRE_NVRTC,
        )
}

/// The PostgreSQL URL to test against (`HOPFUSE_TEST_POSTGRES_URL`), or `None` after
/// reporting `check` as not run (see [`skip`]).
pub fn postgres_url(check: &str) -> Option<String> {
    match std::env::var("HOPFUSE_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            skip(
                check,
                "no database: set HOPFUSE_TEST_POSTGRES_URL=postgres://...",
                REQUIRE_POSTGRES,
            );
            None
        }
    }
}

/// The `nats-server` binary to test against (`HOPFUSE_TEST_NATS_SERVER`, else `nats-server` on
/// the `PATH`), or `None` after reporting `check` as not run (see [`skip`]).
pub fn nats_server(check: &str) -> Option<std::path::PathBuf> {
    let named = std::env::var_os("HOPFUSE_TEST_NATS_SERVER").filter(|v| !v.is_empty());
    let found = named.map(std::path::PathBuf::from).or_else(|| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|dir| dir.join("nats-server"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        skip(
            check,
            "no nats-server: run `eval \"$(scripts/setup-distributed.sh)\"`",
            REQUIRE_NATS,
        );
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A check that cannot run is listed (here in a file of this test's own: the suite's list,
    /// `HOPFUSE_NOT_RUN_LOG`, names only real checks), and fails once required.
    #[test]
    fn a_required_check_that_cannot_run_fails() {
        // A variable of this test alone (tests run in parallel and share the environment).
        const VAR: &str = "HOPFUSE_TEST_REQUIRE_NOT_RUN_POLICY";
        let log = std::env::temp_dir().join(format!("hopfuse-not-run-{}", std::process::id()));
        let _ = std::fs::remove_file(&log);
        let check = "the not-run policy's own test";
        assert!(skip_logging_to(check, "a reason", VAR, Some(log.as_path())));
        let listed = std::fs::read_to_string(&log).unwrap();
        std::fs::remove_file(&log).unwrap();
        assert_eq!(
            listed,
            format!("NOT RUN: {check}: a reason (set {VAR} to make this a failure)\n")
        );
        std::env::set_var(VAR, "1");
        let failed = std::panic::catch_unwind(|| skip_logging_to(check, "a reason", VAR, None));
        std::env::remove_var(VAR);
        let message = failed.unwrap_err();
        let message = message.downcast_ref::<String>().unwrap();
        assert!(
            message.contains("did not run") && message.contains(VAR),
            "{message}"
        );
    }
}
