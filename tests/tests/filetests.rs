//! Per-pass filetests, in the Cranelift manner: `tests/filetests/<pass>/<case>.kir` gives one
//! pass its input as text and checks its output, so a pass's cases move only when that pass
//! does. A case has three sections, each opened by a marker line:
//!
//! ```text
//! ;; program
//! fusion f { ... }          (the program: its fusion and schedule, which the passes read)
//! schedule { ... }
//! ;; before
//! kernel f_kernel ...       (the kernel IR the pass is given, as `Kernel::print` writes it)
//! ;; after
//! kernel f_kernel ...       (the kernel IR the pass must leave)
//! ```
//!
//! or, for a pass that must refuse its input, `;; error: <message>` in place of the `after`
//! section. The harness runs the passes before the tested one on the program only to build
//! what they leave in the pass context and the pipeline plan, then replaces their kernel with
//! the `before` text ([`hopfuse::kir::parse`]), runs the one pass (and the verifier after it),
//! prints the kernel and compares. `HOPFUSE_BLESS=1 cargo test -p hopfuse-tests --test
//! filetests` rewrites each `after` (or `error`) section with what the pass gives; review the
//! diff. A new case needs only its program and an empty `;; before` section: blessing fills the
//! `before` section from the earlier passes once, and from then on it is the case's own text.
//! A program line `// specialize: M=64,N=100` lowers the case specialised to those sizes
//! (`CompileOptions::specialize`; the cases of pass `specialize`).

use hopfuse::passes::PIPELINE;
use std::path::{Path, PathBuf};

const PROGRAM: &str = ";; program";
const BEFORE: &str = ";; before";
const AFTER: &str = ";; after";
const ERROR: &str = ";; error: ";

/// A case file's sections.
struct Case {
    program: String,
    before: String,
    /// The line of the `before` text's first line in the file (for parse errors).
    before_line: usize,
    expected: Expected,
}

#[derive(PartialEq)]
enum Expected {
    After(String),
    Error(String),
}

impl Case {
    fn read(text: &str) -> Result<Case, String> {
        let lines: Vec<&str> = text.lines().collect();
        let find = |marker: &str| lines.iter().position(|l| l.trim_end() == marker);
        let program = find(PROGRAM).ok_or("no `;; program` line")?;
        let before = find(BEFORE).ok_or("no `;; before` line")?;
        let end = lines
            .iter()
            .position(|l| l.trim_end() == AFTER || l.starts_with(ERROR))
            .ok_or("no `;; after` or `;; error: ` line")?;
        if !(program < before && before < end) {
            return Err("the sections are not in the order program, before, after".into());
        }
        let join = |ls: &[&str]| ls.iter().map(|l| format!("{l}\n")).collect::<String>();
        let expected = match lines[end].strip_prefix(ERROR) {
            Some(message) => Expected::Error(message.to_string()),
            None => Expected::After(join(&lines[end + 1..])),
        };
        Ok(Case {
            program: join(&lines[program + 1..before]),
            before: join(&lines[before + 1..end]),
            before_line: before + 2,
            expected,
        })
    }

    fn write(&self) -> String {
        let tail = match &self.expected {
            Expected::After(ir) => format!("{AFTER}\n{ir}"),
            Expected::Error(message) => format!("{ERROR}{message}\n"),
        };
        format!("{PROGRAM}\n{}{BEFORE}\n{}{tail}", self.program, self.before)
    }
}

/// Every case, as (pass, path), sorted.
fn cases() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("filetests");
    let mut out = Vec::new();
    for dir in std::fs::read_dir(&root).expect("tests/filetests/") {
        let dir = dir.expect("an entry").path();
        let pass = dir
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .to_string();
        for f in std::fs::read_dir(&dir).expect("a pass folder") {
            let f = f.expect("an entry").path();
            if f.extension().is_some_and(|e| e == "kir") {
                out.push((pass.clone(), f));
            }
        }
    }
    out.sort();
    out
}

/// What the pass does to the case's `before` text (the earlier passes' kernel when the case has
/// no `before` text yet), and that text: the kernel after it, or its error. The harness's own
/// errors start with the case's path (and the line and column, for its texts).
fn run(pass_name: &str, case: &Case, shown: &str) -> Result<(Expected, String), String> {
    let (_, scheduled) = hopfuse::schedule(&case.program)
        .map_err(|e| format!("{shown}: the program: {}", e.render(&case.program, shown)))?;
    let options = options(&case.program).map_err(|e| format!("{shown}: {e}"))?;
    let mut lowering = hopfuse::Lowering::new(&scheduled, &options);
    let at = PIPELINE
        .iter()
        .position(|p| p.name == pass_name)
        .ok_or_else(|| format!("{shown}: `{pass_name}` is not a pass"))?;
    for pass in &PIPELINE[..at] {
        lowering.run(pass).map_err(|e| {
            let e = e.render(&case.program, shown);
            format!("{shown}: the earlier pass `{}`: {e}", pass.name)
        })?;
    }
    let pass = &PIPELINE[at];
    if !(pass.applies)(&lowering.cx) {
        return Err(format!(
            "{shown}: `{pass_name}` does not run for this program"
        ));
    }
    let before = if case.before.trim().is_empty() {
        lowering.kernel.print()
    } else {
        lowering.kernel = hopfuse::kir::parse(&case.before).map_err(|e| {
            format!(
                "{shown}:{}:{}: {}",
                e.line + case.before_line - 1,
                e.column,
                e.message
            )
        })?;
        case.before.clone()
    };
    let outcome = match lowering.run(pass) {
        Ok(_) => Expected::After(lowering.kernel.print()),
        Err(e) => Expected::Error(
            e.0.first()
                .map(|d| d.message.lines().next().unwrap_or("").to_string())
                .unwrap_or_default(),
        ),
    };
    Ok((outcome, before))
}

/// The compile options a case's program asks for: specialised to the sizes of its
/// `// specialize: M=64,N=100` line, else the defaults.
fn options(program: &str) -> Result<hopfuse::CompileOptions, String> {
    let Some(line) = program
        .lines()
        .find_map(|l| l.trim().strip_prefix("// specialize:"))
    else {
        return Ok(Default::default());
    };
    let sizes = line
        .split(',')
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("`{kv}` in `// specialize:` is not NAME=VALUE"))?;
            let v = v
                .trim()
                .parse()
                .map_err(|_| format!("`{kv}` in `// specialize:` has no integer value"))?;
            Ok((k.trim().to_string(), v))
        })
        .collect::<Result<_, String>>()?;
    Ok(hopfuse::CompileOptions {
        aligned_for: Some(sizes),
        specialize: true,
        ..Default::default()
    })
}

/// The first line where `want` and `got` differ, with the lines around it.
fn difference(want: &str, got: &str) -> String {
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let at = (0..w.len().max(g.len()))
        .find(|&i| w.get(i) != g.get(i))
        .unwrap_or(0);
    let show = |ls: &[&str]| ls[at.min(ls.len())..(at + 3).min(ls.len())].join("\n");
    format!(
        "first difference at line {} of the `after` text:\nexpected:\n{}\ngot:\n{}",
        at + 1,
        show(&w),
        show(&g)
    )
}

#[test]
fn every_pass_has_cases() {
    let cases = cases();
    for pass in PIPELINE {
        let n = cases.iter().filter(|(p, _)| p == pass.name).count();
        assert!(
            n >= 2,
            "pass `{}` has {n} cases in tests/filetests/",
            pass.name
        );
    }
    for (pass, path) in &cases {
        assert!(
            PIPELINE.iter().any(|p| p.name == pass),
            "{}: `{pass}` is not a pass",
            path.display()
        );
    }
}

#[test]
fn each_pass_turns_its_before_text_into_its_after_text() {
    let bless = std::env::var("HOPFUSE_BLESS").is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    for (pass, path) in cases() {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).expect("a case");
        let mut case = Case::read(&text).unwrap_or_else(|e| panic!("{shown}: {e}"));
        let (got, before) = match run(&pass, &case, &shown) {
            Ok(r) => r,
            Err(e) => {
                failures.push(e);
                continue;
            }
        };
        if let Expected::After(after) = &got {
            if after == &before {
                failures.push(format!(
                    "{shown}: `{pass}` leaves this kernel unchanged, so the case does not test it"
                ));
            }
        }
        let matches = match (&case.expected, &got) {
            (Expected::After(want), Expected::After(got)) => want.trim_end() == got.trim_end(),
            (want, got) => want == got,
        };
        if bless {
            if !matches || case.before.trim().is_empty() {
                case.before = before;
                case.expected = got;
                std::fs::write(&path, case.write()).expect("the case is written");
            }
            continue;
        }
        if !matches {
            let message = match (&case.expected, &got) {
                (Expected::After(want), Expected::After(got)) => difference(want, got),
                (Expected::Error(want), Expected::Error(got)) => {
                    format!("expected the error `{want}`, got `{got}`")
                }
                (Expected::Error(want), Expected::After(_)) => {
                    format!("expected the error `{want}`, but the pass ran")
                }
                (Expected::After(_), Expected::Error(got)) => format!("the pass failed: {got}"),
            };
            failures.push(format!("{shown}: {message}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} filetest(s) failed (HOPFUSE_BLESS=1 rewrites the expected sections):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
