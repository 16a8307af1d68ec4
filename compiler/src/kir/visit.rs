//! Walks of the kernel IR's statement tree. They take a block (`[Stmt]`) and reach the
//! statements inside it through [`Stmt::children`] / [`Stmt::children_mut`] only, so a new
//! statement kind with a body is walked everywhere once `children` knows it.
//!
//! Read-only walks visit statements outer first ([`for_each_stmt`], [`walk`], [`any_stmt`]).
//! Rewrites take a block by value, statement by statement, and give each one's replacement
//! (zero or more statements): [`rewrite_post`] after the statement's bodies were rewritten,
//! [`rewrite_pre`] before, then into the replacements' bodies unless told to stop. Their `try_`
//! forms stop at the first error (the block is then left partly rewritten).

use super::{Loop, Stmt};
use std::convert::Infallible;

/// Whether a walk enters the bodies of the statement it just visited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Descend,
    Skip,
}

/// A pre-order rewrite's replacement for one statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// These statements, whose bodies are rewritten in turn.
    Descend(Vec<Stmt>),
    /// These statements as they are.
    Keep(Vec<Stmt>),
}

/// Calls `f` on every statement of `body` and of the bodies inside it, outer ones first.
pub fn for_each_stmt<'a>(body: &'a [Stmt], f: &mut dyn FnMut(&'a Stmt)) {
    walk(body, &mut |s| {
        f(s);
        Flow::Descend
    });
}

/// Calls `f` on the statements of `body`, outer ones first, entering the bodies of those for
/// which it returns [`Flow::Descend`].
pub fn walk<'a>(body: &'a [Stmt], f: &mut dyn FnMut(&'a Stmt) -> Flow) {
    for st in body {
        if f(st) == Flow::Descend {
            for child in st.children() {
                walk(child, f);
            }
        }
    }
}

/// Calls `f` on every statement, outer ones first, with the loops around it (outermost first).
pub fn for_each_in_loops<'a>(body: &'a [Stmt], f: &mut dyn FnMut(&'a Stmt, &[&'a Loop])) {
    fn go<'a>(
        body: &'a [Stmt],
        around: &mut Vec<&'a Loop>,
        f: &mut dyn FnMut(&'a Stmt, &[&'a Loop]),
    ) {
        for st in body {
            f(st, around);
            let looped = if let Stmt::Loop(l) = st {
                around.push(l);
                true
            } else {
                false
            };
            for child in st.children() {
                go(child, around, f);
            }
            if looped {
                around.pop();
            }
        }
    }
    go(body, &mut Vec::new(), f);
}

/// Whether `pred` holds for a statement of `body` or of the bodies inside it (stops at the
/// first).
pub fn any_stmt(body: &[Stmt], pred: &mut dyn FnMut(&Stmt) -> bool) -> bool {
    body.iter()
        .any(|st| pred(st) || st.children().any(|child| any_stmt(child, pred)))
}

/// Calls `f` on every statement, mutably, outer ones first; the bodies entered are the ones
/// `f` leaves (when it returns [`Flow::Descend`]).
pub fn for_each_stmt_mut(body: &mut [Stmt], f: &mut dyn FnMut(&mut Stmt) -> Flow) {
    for st in body {
        if f(st) == Flow::Descend {
            for child in st.children_mut() {
                for_each_stmt_mut(child, f);
            }
        }
    }
}

/// Calls `f` on every block: the bodies inside `body` (inner ones first), then `body` itself.
pub fn for_each_block_mut(body: &mut Vec<Stmt>, f: &mut dyn FnMut(&mut Vec<Stmt>)) {
    for st in body.iter_mut() {
        for child in st.children_mut() {
            for_each_block_mut(child, f);
        }
    }
    f(body);
}

/// Replaces every statement by `f`'s statements for it, its bodies rewritten first.
pub fn rewrite_post(body: &mut Vec<Stmt>, f: &mut dyn FnMut(Stmt) -> Vec<Stmt>) {
    let done: Result<(), Infallible> = try_rewrite_post(body, &mut |s| Ok(f(s)));
    let Ok(()) = done;
}

/// [`rewrite_post`] with a rewrite that may fail.
pub fn try_rewrite_post<E>(
    body: &mut Vec<Stmt>,
    f: &mut dyn FnMut(Stmt) -> Result<Vec<Stmt>, E>,
) -> Result<(), E> {
    let old = std::mem::take(body);
    body.reserve(old.len());
    for mut st in old {
        for child in st.children_mut() {
            try_rewrite_post(child, f)?;
        }
        body.extend(f(st)?);
    }
    Ok(())
}

/// Replaces every statement by `f`'s statements for it, then rewrites their bodies unless `f`
/// said [`Step::Keep`].
pub fn rewrite_pre(body: &mut Vec<Stmt>, f: &mut dyn FnMut(Stmt) -> Step) {
    let done: Result<(), Infallible> = try_rewrite_pre(body, &mut |s| Ok(f(s)));
    let Ok(()) = done;
}

/// [`rewrite_pre`] with a rewrite that may fail.
pub fn try_rewrite_pre<E>(
    body: &mut Vec<Stmt>,
    f: &mut dyn FnMut(Stmt) -> Result<Step, E>,
) -> Result<(), E> {
    let old = std::mem::take(body);
    body.reserve(old.len());
    for st in old {
        match f(st)? {
            Step::Keep(new) => body.extend(new),
            Step::Descend(new) => {
                for mut st in new {
                    for child in st.children_mut() {
                        try_rewrite_pre(child, f)?;
                    }
                    body.push(st);
                }
            }
        }
    }
    Ok(())
}

/// Bytes of reduction scratch (shared memory) per thread of the block that `body`'s block
/// reductions need: one 8-byte slot per thread for [`Stmt::BlockReduce`], one 12-byte slot
/// (mean, m2, count) for [`Stmt::BlockWelford`]; None without either.
pub fn reduce_scratch_per_thread(body: &[Stmt]) -> Option<i64> {
    let mut bytes = None;
    for_each_stmt(body, &mut |s| match s {
        Stmt::BlockReduce { .. } => bytes = bytes.max(Some(8)),
        Stmt::BlockWelford { .. } => bytes = bytes.max(Some(12)),
        Stmt::GridReduce(_) => bytes = bytes.max(Some(8)),
        _ => {}
    });
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fusion::ParallelType;
    use crate::kir::{Kernel, LoopKey, Val, WarpRoles};

    fn kernel(body: Vec<Stmt>) -> Kernel {
        Kernel {
            body,
            ..Kernel::empty("k".into())
        }
    }

    /// The dump of `body` (the kernel's statements, without its header).
    fn text(body: &[Stmt]) -> String {
        let header = kernel(Vec::new()).print();
        let full = kernel(body.to_vec()).print();
        full.strip_prefix(&header).expect("same header").to_string()
    }

    fn serial(var: &str, body: Vec<Stmt>) -> Stmt {
        Stmt::Loop(Loop {
            key: LoopKey::new(0),
            var: var.into(),
            extent: Val::Int(4),
            parallel: ParallelType::Serial,
            body,
            digits: Vec::new(),
        })
    }

    fn let_(var: &str) -> Stmt {
        Stmt::Let {
            var: var.into(),
            value: Val::Int(0),
            broadcast: false,
        }
    }

    /// A loop holding a conditional with both branches, and warp roles.
    fn sample() -> Vec<Stmt> {
        vec![
            Stmt::Sync,
            serial(
                "i",
                vec![
                    Stmt::If {
                        cond: Val::lt(Val::Var("i".into()), Val::Int(2)),
                        then: vec![Stmt::Sync, Stmt::BulkCommit],
                        els: vec![let_("e")],
                    },
                    Stmt::BulkCommit,
                ],
            ),
            Stmt::WarpRoles(WarpRoles {
                is_producer: Val::Warp,
                producer: vec![serial("p", vec![Stmt::Sync])],
                consumer: vec![let_("c"), Stmt::Sync],
                registers: None,
                consumer_threads: 128,
            }),
        ]
    }

    #[test]
    fn children_are_every_body_in_print_order() {
        let body = sample();
        let counts: Vec<usize> = body.iter().map(|s| s.children().count()).collect();
        assert_eq!(counts, [0, 1, 2]);
        let Stmt::Loop(l) = &body[1] else {
            unreachable!()
        };
        let bodies: Vec<usize> = l.body[0].children().map(|b| b.len()).collect();
        assert_eq!(bodies, [2, 1], "then before els");
        let bodies: Vec<usize> = body[2].children().map(|b| b.len()).collect();
        assert_eq!(bodies, [1, 2], "producer before consumer");
    }

    #[test]
    fn rewrite_post_replaces_statements_by_any_number_in_every_body() {
        let mut body = sample();
        rewrite_post(&mut body, &mut |s| match s {
            Stmt::Sync => vec![Stmt::ClusterSync, Stmt::Sync],
            Stmt::BulkCommit => Vec::new(),
            other => vec![other],
        });
        assert_eq!(
            text(&body),
            "  cluster_sync
  __syncthreads()
  for i in 4 @Serial key 0:
    if i < 2:
      cluster_sync
      __syncthreads()
    else:
      let e = 0
  producer warps (if warp):
    for p in 4 @Serial key 0:
      cluster_sync
      __syncthreads()
  consumer warps (128 threads, barriers are named):
    let c = 0
    cluster_sync
    __syncthreads()
"
        );
    }

    #[test]
    fn rewrite_post_sees_bodies_already_rewritten() {
        // A loop whose body became empty is dropped: the loop is visited after its body.
        let mut body = vec![serial("i", vec![Stmt::Sync]), let_("x")];
        rewrite_post(&mut body, &mut |s| match s {
            Stmt::Sync => Vec::new(),
            Stmt::Loop(l) if l.body.is_empty() => Vec::new(),
            other => vec![other],
        });
        assert_eq!(text(&body), "  let x = 0\n");
    }

    #[test]
    fn rewrite_pre_enters_only_the_statements_it_is_told_to() {
        let mut body = sample();
        let mut seen = Vec::new();
        rewrite_pre(&mut body, &mut |s| {
            seen.push(crate::kir::Kernel::stmt_head(&kernel(Vec::new()), &s));
            match s {
                // Replaced by its body, which is kept as it is.
                Stmt::Loop(l) if l.var == "i" => Step::Keep(l.body),
                Stmt::Sync => Step::Descend(vec![Stmt::ClusterSync]),
                other => Step::Descend(vec![other]),
            }
        });
        assert_eq!(
            text(&body),
            "  cluster_sync
  if i < 2:
    __syncthreads()
    bulk_commit_group
  else:
    let e = 0
  bulk_commit_group
  producer warps (if warp):
    for p in 4 @Serial key 0:
      cluster_sync
  consumer warps (128 threads, barriers are named):
    let c = 0
    cluster_sync
"
        );
        // Outer statements first; nothing inside the kept body.
        assert_eq!(
            seen,
            [
                "__syncthreads()",
                "for i in 4 @Serial key 0:",
                "producer warps (if warp):",
                "for p in 4 @Serial key 0:",
                "__syncthreads()",
                "let c = 0",
                "__syncthreads()",
            ]
        );
    }

    #[test]
    fn a_failing_rewrite_stops_at_its_first_error() {
        let mut body = sample();
        let mut calls = 0;
        let r = try_rewrite_post(&mut body, &mut |s| {
            calls += 1;
            match s {
                Stmt::Let { var, .. } => Err(var),
                other => Ok(vec![other]),
            }
        });
        // The first sync, the `if`'s then (two statements), then its els: `let e` fails.
        assert_eq!(r, Err("e".to_string()));
        assert_eq!(calls, 4);
        let r = try_rewrite_pre(&mut sample(), &mut |s| match s {
            Stmt::WarpRoles(_) => Err("roles"),
            other => Ok(Step::Descend(vec![other])),
        });
        assert_eq!(r, Err("roles"));
    }

    #[test]
    fn walks_visit_outer_statements_first_and_skip_where_told() {
        let body = sample();
        let k = kernel(Vec::new());
        let mut all = Vec::new();
        for_each_stmt(&body, &mut |s| all.push(k.stmt_head(s)));
        assert_eq!(all.len(), 12);
        assert_eq!(
            all[..3],
            ["__syncthreads()", "for i in 4 @Serial key 0:", "if i < 2:"]
        );
        let mut outside_loops = 0;
        walk(&body, &mut |s| {
            outside_loops += 1;
            match s {
                Stmt::Loop(_) => Flow::Skip,
                _ => Flow::Descend,
            }
        });
        // sync, loop i, roles, loop p, let c, sync.
        assert_eq!(outside_loops, 6);
        assert!(any_stmt(
            &body,
            &mut |s| matches!(s, Stmt::Let { var, .. } if var == "c")
        ));
        assert!(!any_stmt(&body, &mut |s| matches!(s, Stmt::ClusterSync)));
    }

    #[test]
    fn statements_are_visited_with_the_loops_around_them() {
        let body = sample();
        let mut around_syncs = Vec::new();
        for_each_in_loops(&body, &mut |s, around| {
            if *s == Stmt::Sync {
                around_syncs.push(around.iter().map(|l| l.var.as_str()).collect::<Vec<_>>());
            }
        });
        assert_eq!(around_syncs, [vec![], vec!["i"], vec!["p"], vec![]]);
    }

    #[test]
    fn mutable_walks_see_their_own_changes() {
        let mut body = sample();
        // Emptying the loop `i` before its body is entered: nothing inside it is visited.
        let mut lets = 0;
        for_each_stmt_mut(&mut body, &mut |s| {
            match s {
                Stmt::Loop(l) if l.var == "i" => l.body.clear(),
                Stmt::Let { .. } => lets += 1,
                _ => {}
            }
            Flow::Descend
        });
        assert_eq!(lets, 1);
        let mut sizes = Vec::new();
        for_each_block_mut(&mut body, &mut |b| sizes.push(b.len()));
        // Inner blocks first: loop i, loop p, producer, consumer, the kernel's.
        assert_eq!(sizes, [0, 1, 1, 2, 3]);
    }
}
