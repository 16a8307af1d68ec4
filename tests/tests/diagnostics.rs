//! Where errors point and how many are reported: every syntax error (the parser resumes at the
//! next statement), an unclosed bracket at the bracket, every independent schedule error, and
//! errors found by a pass at the schedule statement that caused them.

use hopfuse::Diagnostic;

fn errors(src: &str) -> Vec<Diagnostic> {
    match hopfuse::compile(src, &Default::default()) {
        Ok(_) => panic!("expected errors for:\n{src}"),
        Err(e) => e.0,
    }
}

/// (line, column, message) of each error.
fn located(src: &str) -> Vec<(usize, usize, String)> {
    errors(src)
        .into_iter()
        .map(|d| {
            assert!(d.span.is_some(), "no location: {}", d.message);
            (d.line, d.column, d.message)
        })
        .collect()
}

const ADD: &str = include_str!("../../examples/basics/add.hf");

#[test]
fn a_block_too_large_points_at_the_split_that_made_it() {
    let src = ADD.replace("c.split(0, 128)", "c.split(0, 4096)");
    let e = located(&src);
    assert_eq!(e.len(), 1, "{e:?}");
    let (line, column, msg) = &e[0];
    assert!(msg.starts_with("the block has 4096 threads"), "{msg}");
    let at = src.lines().nth(line - 1).unwrap();
    assert_eq!(at.trim(), "c.split(0, 4096)", "line {line}");
    assert_eq!(*column, at.find('c').unwrap() + 1);
}

#[test]
fn shared_memory_over_the_limit_points_at_the_cache() {
    let src = "fusion f {\n  input a: f32[M, 65536]\n  c = exp(a)\n  output c\n}\nschedule {\n  a_s = cache_after(a, memory=shared)\n  c.parallelize(0, BIDx)\n  propagate(c)\n  a_s.inline_at(1)\n}\n";
    let e = located(src);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].0, 7, "{e:?}");
    assert!(e[0].2.contains("262144 bytes of shared memory"), "{e:?}");
}

#[test]
fn a_missing_paren_is_reported_at_the_unclosed_paren() {
    let src = "fusion f {\n  input x: f32[M]\n  y = exp(x\n  output y\n}\n";
    let e = located(src);
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!((e[0].0, e[0].1), (3, 10), "{e:?}");
    assert_eq!(e[0].2, "unclosed `(`: expected `)` before `output`");
    // In a schedule, and the statements after it are still parsed (no errors of their own).
    let src = ADD.replace("c.split(0, 4)", "c.split(0, 4");
    let e = located(&src);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].2.starts_with("unclosed `(`"), "{e:?}");
    assert_eq!(src.lines().nth(e[0].0 - 1).unwrap().trim(), "c.split(0, 4");
    // A bracket of a shape; and at the end of input.
    let e = located("fusion f {\n  input x: f32[M, N\n  output x\n}\n");
    assert_eq!(
        (e[0].0, e[0].1, e[0].2.as_str()),
        (2, 15, "unclosed `[`: expected `]` before `output`")
    );
    let e = located("fusion f {\n  input x: f32[M]\n  y = exp((x)\n}");
    assert_eq!((e[0].0, e[0].1), (3, 10), "{e:?}");
    // Not every missing comma is a missing bracket: on the same line it is reported where it is.
    let e = located("fusion f {\n  input x: f32[M]\n  y = max(x x)\n  output y\n}\n");
    assert_eq!((e[0].0, e[0].1), (3, 13), "{e:?}");
    assert!(
        e[0].2.starts_with("expected `,` or `)`, found `x`"),
        "{e:?}"
    );
}

#[test]
fn every_independent_syntax_error_is_reported() {
    let src = "fusion f {\n  input a: f32[M]\n  b = a *\n  c = exp(a))\n  d = + \n  output c\n}\nschedule {\n  c.split(0 4)\n  c.parallelize(0, BIDx)\n  c..split(1, 2)\n}\n";
    let e = located(src);
    let lines: Vec<usize> = e.iter().map(|x| x.0).collect();
    assert_eq!(lines, vec![3, 4, 5, 9, 11], "{e:?}");
    assert!(e[0].2.starts_with("expected an expression"), "{e:?}");
    assert!(e[1].2.starts_with("expected end of statement"), "{e:?}");
    // The existing single-error API returns the first of them.
    let first = hopfuse::frontend::parse(src).unwrap_err().locate(src);
    assert_eq!((first.line, first.message.as_str()), (3, e[0].2.as_str()));
    assert_eq!(hopfuse::frontend::parse_all(src).unwrap_err().len(), 5);
}

#[test]
fn every_independent_schedule_error_is_reported_once() {
    // Two unrelated mistakes on two tensors, and one that follows from the first (skipped).
    let src = "fusion f {\n  input a: f32[M, N]\n  b = exp(a)\n  c = b + 1.0\n  output c\n}\nschedule {\n  b.split(0, 0)\n  b.parallelize(2, TIDx)\n  c.split(7, 4)\n  c.parallelize(0, BIDx)\n  x_c = cache_after(q)\n  x_c.split(0, 2)\n}\n";
    let e = located(src);
    let lines: Vec<usize> = e.iter().map(|x| x.0).collect();
    assert_eq!(lines, vec![8, 10, 12], "{e:?}");
    assert!(e[0].2.contains("split factor must be at least 1"), "{e:?}");
    assert!(e[1].2.contains("axis 7 is out of range"), "{e:?}");
    assert!(e[2].2.contains("unknown tensor `q`"), "{e:?}");
}

#[test]
fn a_good_program_still_compiles_after_recovery_changes() {
    hopfuse::compile(ADD, &Default::default()).unwrap();
    // Statements separated by `;` and calls spread over lines.
    let src = ADD
        .replace("c.split(0, 4)\n", "c.split(0,\n    4); c.split(0, 128)\n")
        .replace("  c.split(0, 128)\n", "");
    hopfuse::compile(&src, &Default::default()).unwrap();
}
