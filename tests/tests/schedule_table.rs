//! The schedule primitives' table drives the interpreter and its errors: every entry is
//! dispatched, an unknown name lists the near ones, and arity, argument-name and argument-kind
//! errors are worded from the entry's parameters, at the argument, with the statement as the
//! user wrote it.

use hopfuse::fusion::schedule::table::{self, ArgKind, Form, IfAbsent, Passing, PRIMITIVES};

const ADD: &str =
    "fusion f {\n  input a: f32[M, N]\n  input b: f32[M, N]\n  c = a + b\n  output c\n}\n";

/// The errors of a schedule on `ADD`, as (line, column, message); line 1 is the schedule's first.
fn errors(schedule: &str) -> Vec<(usize, usize, String)> {
    let src = format!("{ADD}schedule {{\n{schedule}\n}}\n");
    let first = ADD.lines().count() + 2;
    match hopfuse::compile(&src, &Default::default()) {
        Ok(_) => panic!("expected an error for:\n{schedule}"),
        Err(e) => {
            e.0.into_iter()
                .map(|d| (d.line + 1 - first, d.column, d.message))
                .collect()
        }
    }
}

fn error(schedule: &str) -> (usize, usize, String) {
    let mut e = errors(schedule);
    assert_eq!(e.len(), 1, "{e:?}");
    e.remove(0)
}

/// A statement calling `p` in its own form with no arguments.
fn bare(p: &table::Primitive) -> String {
    match p.form() {
        Form::Method => format!("  c.{}()", p.name),
        Form::Statement => format!("  {}()", p.name),
        Form::Binding => format!("  x = {}()", p.name),
    }
}

#[test]
fn every_primitive_is_dispatched_and_checks_its_arity_from_the_table() {
    for p in PRIMITIVES {
        let required = p
            .params
            .iter()
            .filter(|q| q.passing != Passing::Named && q.default == IfAbsent::Required)
            .count();
        let src = format!("{ADD}schedule {{\n{}\n}}\n", bare(p));
        let result = hopfuse::compile(&src, &Default::default());
        if required == 0 {
            // Nothing is missing: an error, if any, is the primitive's own (not its name's).
            if let Err(e) = result {
                assert!(
                    !e.to_string().contains("unknown schedule"),
                    "{}: {e}",
                    p.name
                );
            }
            continue;
        }
        let e = result.unwrap_err().to_string();
        assert!(
            e.contains("positional argument(s) (") && e.contains(", got 0"),
            "{}: {e}",
            p.name
        );
        let first = p
            .params
            .iter()
            .find(|q| q.passing != Passing::Named)
            .unwrap();
        assert!(e.contains(first.name), "{}: {e}", p.name);
    }
}

#[test]
fn an_unknown_primitive_lists_the_near_names_and_those_of_its_form() {
    let (line, column, msg) = error("  c.splt(0, 4)");
    assert_eq!((line, column), (1, 3));
    assert!(
        msg.starts_with("c.splt: unknown schedule method `splt`: did you mean `split`? ("),
        "{msg}"
    );
    for p in PRIMITIVES.iter().filter(|p| p.form() == Form::Method) {
        assert!(msg.contains(p.name), "{} is not listed: {msg}", p.name);
    }
    assert!(!msg.contains("propagate"), "{msg}");
    let (_, _, msg) = error("  x = cache(a)");
    assert!(
        msg.contains("did you mean `cache_after` or `cache_before`?"),
        "{msg}"
    );
    let (_, _, msg) = error("  frobnicate(c)");
    assert!(
        msg.starts_with("frobnicate(...): unknown schedule function `frobnicate` (propagate"),
        "{msg}"
    );
    assert!(!msg.contains("did you mean"), "{msg}");
}

#[test]
fn a_primitive_in_another_form_says_how_it_is_written() {
    let (_, _, msg) = error("  split(c, 0, 4)");
    let split = table::primitive("split").unwrap();
    assert_eq!(
        msg,
        format!(
            "split(...): `split` is a tensor method: write `{}`",
            split.written
        )
    );
    let (_, _, msg) = error("  c.propagate()");
    assert_eq!(
        msg,
        "c.propagate: `propagate` is a statement: write `propagate(t)`"
    );
    let (_, _, msg) = error("  cache_after(a)");
    assert_eq!(
        msg,
        "cache_after(...): bind the result: `name = cache_after(tensor)`"
    );
}

#[test]
fn a_wrong_kind_of_argument_is_reported_from_the_table_at_the_argument() {
    let split = table::primitive("split").unwrap();
    let factor = &split.params[1];
    assert_eq!(factor.kind, ArgKind::Int);
    let (line, column, msg) = error("  c.split(0, x)");
    assert_eq!(
        msg,
        format!(
            "c.split: expected {} for `{}`",
            factor.kind.describe(),
            factor.name
        )
    );
    assert_eq!((line, column), (1, 14), "at `x`");
    // A keyword of a kind the table lists: the choices come from the kind.
    let (line, column, msg) = error("  c.set_memory(cache)");
    assert_eq!(
        msg,
        format!(
            "c.set_memory: unknown memory `cache` ({})",
            table::either(ArgKind::Memory.choices())
        )
    );
    assert_eq!((line, column), (1, 16));
    // The statement is named as the user wrote it (`a_s`: a cache made earlier in the schedule).
    let (_, _, msg) = error("  a_s = cache_after(a, memory=shared)\n  a_s.circular_buffer(two)");
    assert_eq!(msg, "a_s.circular_buffer: expected an integer for `stages`");
}

#[test]
fn named_arguments_are_the_tables() {
    let (line, column, msg) =
        error("  a_s = cache_after(a, memory=shared)\n  a_s.circular_buffer(2, prefech=1)");
    assert_eq!(
        msg,
        "a_s.circular_buffer: unknown argument `prefech` (prefetch, war)"
    );
    assert_eq!((line, column), (2, 26));
    let (_, _, msg) = error("  c.split(0, 4, factor=2)");
    assert_eq!(msg, "c.split: unknown argument `factor` (none are named)");
    let (_, _, msg) = error("  x = cache_after(a, memory=shared, memory=local)");
    assert_eq!(msg, "x = cache_after(...): `memory` is given twice");
    let (_, _, msg) =
        error("  a_s = cache_after(a, memory=shared)\n  a_s.circular_buffer(prefetch=1, 3, 2)");
    assert_eq!(msg, "a_s.circular_buffer: `prefetch` is given twice");
    // A nested call's arguments are checked against its own parameters.
    let (_, _, msg) = error(
        "  a_s = cache_after(a, memory=shared, load=tma)\n  a_s.circular_buffer(2, warp_specialized(TIDy, warps=1))",
    );
    assert_eq!(
        msg,
        "warp_specialized(...): unknown argument `warps` (registers, warp, turns)"
    );
}

#[test]
fn optional_positional_parameters_are_matched_by_kind() {
    // circular_buffer(stages[, prefetch][, warp_specialized(...)]): a call skips the prefetch.
    let (_, _, msg) = error(
        "  a_s = cache_after(a, memory=shared)\n  a_s.circular_buffer(2, warp_specialized(TIDy))",
    );
    assert!(
        msg.contains("warp_specialized: `a_s` is filled by plain loads"),
        "the call reached the primitive: {msg}"
    );
    let (_, _, msg) =
        error("  a_s = cache_after(a, memory=shared)\n  a_s.circular_buffer(2, 1, 1)");
    assert_eq!(msg, "a_s.circular_buffer: expected warp_specialized(...)");
    let (_, _, msg) = error("  a_s = cache_after(a, memory=shared)\n  a_s.circular_buffer(2, two)");
    assert_eq!(
        msg,
        "a_s.circular_buffer: expected the prefetch (an integer) or warp_specialized(...)"
    );
}

#[test]
fn every_keyword_kind_is_the_compilers() {
    use hopfuse::fusion::{FenceMode, LoadKind, MemoryType, ParallelType};
    for p in ParallelType::ALL {
        assert!(ArgKind::Parallel.choices().contains(&p.name()));
    }
    assert_eq!(ArgKind::Parallel.choices().len(), ParallelType::ALL.len());
    for k in ArgKind::Memory.choices() {
        assert!(MemoryType::parse(k).is_some(), "{k}");
    }
    for k in ArgKind::Load
        .choices()
        .iter()
        .chain(ArgKind::Store.choices())
    {
        assert!(LoadKind::parse(k).is_some(), "{k}");
    }
    for k in ArgKind::Fence.choices() {
        assert!(FenceMode::parse(k).is_some(), "{k}");
    }
    // Every default written as a value is one the parameter's kind accepts.
    for p in PRIMITIVES {
        for q in p.params.iter().chain(p.nested().flat_map(|n| n.params)) {
            if let (IfAbsent::Is(v), choices) = (q.default, q.kind.choices()) {
                assert!(
                    choices.is_empty() || choices.contains(&v),
                    "{}: {} defaults to {v}",
                    p.name,
                    q.name
                );
            }
        }
    }
}
