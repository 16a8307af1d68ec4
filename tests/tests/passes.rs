//! Per-pass tests in the Cranelift manner: `tests/passes/<pass>/<case>.hf` is a small program,
//! and its snapshot `passes__<pass>__<case>.snap` is the kernel IR after that one pass (its dump
//! alone, the program in the snapshot's header), so a pass can change without every
//! whole-pipeline golden moving. The folder names the pass; every pass of `PIPELINE` has at
//! least two cases, and each case must be one the pass changes. Update with
//! `INSTA_UPDATE=always cargo test -p hopfuse-tests --test passes` and review the diff.

use std::path::{Path, PathBuf};

/// Every case, as (pass, case name, path), sorted.
fn cases() -> Vec<(String, String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("passes");
    let mut out = Vec::new();
    for dir in std::fs::read_dir(&root).expect("tests/passes/") {
        let dir = dir.expect("entry").path();
        let pass = dir.file_name().expect("name").to_string_lossy().to_string();
        for f in std::fs::read_dir(&dir).expect("a pass folder") {
            let f = f.expect("entry").path();
            if f.extension().is_some_and(|e| e == "hf") {
                let case = f.file_stem().expect("stem").to_string_lossy().to_string();
                out.push((pass.clone(), case, f));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_pass_has_cases() {
    let cases = cases();
    for pass in hopfuse::passes::PIPELINE {
        let n = cases.iter().filter(|(p, _, _)| p == pass.name).count();
        assert!(
            n >= 2,
            "pass `{}` has {n} cases in tests/passes/",
            pass.name
        );
    }
    for (pass, case, _) in &cases {
        assert!(
            hopfuse::passes::PIPELINE.iter().any(|p| p.name == pass),
            "tests/passes/{pass}/{case}.hf: `{pass}` is not a pass"
        );
    }
}

#[test]
fn the_ir_after_each_pass_matches_its_snapshot() {
    for (pass, case, path) in cases() {
        let src = std::fs::read_to_string(&path).expect("case");
        let shown = path.display().to_string();
        let c = hopfuse::compile(&src, &Default::default())
            .unwrap_or_else(|e| panic!("{}", e.render(&src, &shown)));
        let at = c
            .passes
            .iter()
            .position(|d| d.name == pass)
            .unwrap_or_else(|| panic!("{shown}: pass `{pass}` did not run"));
        // The dump before is the fusion IR for the first pass: never equal.
        assert_ne!(
            c.passes[at - 1].ir,
            c.passes[at].ir,
            "{shown}: `{pass}` leaves this kernel unchanged, so the case does not test it"
        );
        insta::with_settings!({
            description => src.trim_end(),
            omit_expression => true,
        }, {
            insta::assert_snapshot!(format!("{pass}__{case}"), c.passes[at].ir);
        });
    }
}
