//! Walks of the kernel IR's statement tree. They take a block (`[Stmt]`) and reach the
//! statements inside it through [`Stmt::children`] / [`Stmt::children_mut`] only, so a new
//! statement kind with a body is walked everywhere once `children` knows it.
//!
//! Read-only walks visit statements outer first ([`for_each_stmt`], [`walk`], [`any_stmt`]).
//! Rewrites take a block by value, statement by statement, and give each one's replacement
//! (zero or more statements): [`rewrite_post`] after the statement's bodies were rewritten,
//! [`rewrite_pre`] before, then into the replacements' bodies unless told to stop. Their `try_`
//! forms stop at the first error (the block is then left partly rewritten).
//!
//! Walks that keep a scope (the loops entered so far and what each binds, the guards of the
//! branch, a per-block state) implement [`Visitor`] (read-only, [`visit`]) or [`VisitorMut`]
//! (in place, [`visit_mut`]): hooks on each statement, on entering and leaving each of its
//! bodies (where a scope is pushed and popped, or a body is skipped) and, in place, on each
//! block once its statements are done. [`find_mut`] reaches the block of the first statement
//! a search names, to edit it there.

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

/// A read-only walk with scope: [`visit`] calls [`Visitor::stmt`] on each statement, outer
/// ones first, then for each of its bodies [`Visitor::enter`], [`Visitor::block_start`], the
/// body's statements and [`Visitor::leave`], then [`Visitor::after`] on the statement. A scope a statement opens for
/// all its bodies is pushed in `stmt` and popped in `after`; one per body in `enter` and
/// `leave`. Every hook has a default that descends everywhere and keeps nothing.
pub trait Visitor<'a> {
    /// A block (a body entered, or the walked block itself) before its statements;
    /// [`Flow::Skip`]: none of them.
    fn block_start(&mut self, body: &'a [Stmt]) -> Flow {
        let _ = body;
        Flow::Descend
    }

    /// Statement `st`, at index `at` of its block; [`Flow::Skip`]: none of its bodies.
    fn stmt(&mut self, st: &'a Stmt, at: usize) -> Flow {
        let _ = (st, at);
        Flow::Descend
    }

    /// Before body `body` of `st` (its place in [`Stmt::children`]); [`Flow::Skip`]: not
    /// this body (and no [`Visitor::leave`] for it).
    fn enter(&mut self, st: &'a Stmt, body: usize) -> Flow {
        let _ = (st, body);
        Flow::Descend
    }

    /// After body `body` of `st` was walked.
    fn leave(&mut self, st: &'a Stmt, body: usize) {
        let _ = (st, body);
    }

    /// After `st` (at index `at` of its block) and its bodies, whatever [`Visitor::stmt`] said.
    fn after(&mut self, st: &'a Stmt, at: usize) {
        let _ = (st, at);
    }
}

/// Walks `body` with `v` (see [`Visitor`]).
pub fn visit<'a, V: Visitor<'a> + ?Sized>(body: &'a [Stmt], v: &mut V) {
    if v.block_start(body) == Flow::Skip {
        return;
    }
    for (at, st) in body.iter().enumerate() {
        if v.stmt(st, at) == Flow::Descend {
            for (i, child) in st.children().enumerate() {
                if v.enter(st, i) == Flow::Descend {
                    visit(child, v);
                    v.leave(st, i);
                }
            }
        }
        v.after(st, at);
    }
}

/// An in-place walk with scope: [`visit_mut`] calls [`VisitorMut::block_start`] on the block,
/// then offers each statement, outer ones first, to
/// [`VisitorMut::splice`] (which may replace it by any number of statements, not walked), else
/// calls [`VisitorMut::stmt`] on it (which may change it or replace it by one statement), then
/// for each body of what it left [`VisitorMut::enter`], the body's walk (as the block's) and
/// [`VisitorMut::leave`], then offers the statement to
/// [`VisitorMut::splice_after`]; last [`VisitorMut::block`] on the walked block itself. Blocks
/// are edited in place, not rebuilt. The first error stops the walk (the tree is then left
/// partly visited).
pub trait VisitorMut {
    /// What a hook may fail with (`Infallible` for walks that cannot).
    type Error;

    /// Statement `st`, at index `at` of its block, before anything else: `Some` replaces it by
    /// those statements, which the walk then passes over.
    fn splice(&mut self, st: &mut Stmt, at: usize) -> Result<Option<Vec<Stmt>>, Self::Error> {
        let _ = (st, at);
        Ok(None)
    }

    /// Statement `st`, at index `at` of its block; [`Flow::Skip`]: none of its bodies.
    fn stmt(&mut self, st: &mut Stmt, at: usize) -> Result<Flow, Self::Error> {
        let _ = (st, at);
        Ok(Flow::Descend)
    }

    /// Before body `body` of `st` (its place in [`Stmt::children_mut`]); [`Flow::Skip`]: not
    /// this body (and no [`VisitorMut::leave`] for it).
    fn enter(&mut self, st: &Stmt, body: usize) -> Result<Flow, Self::Error> {
        let _ = (st, body);
        Ok(Flow::Descend)
    }

    /// After body `body` of `st` was walked (and its [`VisitorMut::block`] called).
    fn leave(&mut self, st: &mut Stmt, body: usize) -> Result<(), Self::Error> {
        let _ = (st, body);
        Ok(())
    }

    /// Statement `st`, at index `at` of its block, after its bodies were walked (whatever
    /// [`VisitorMut::stmt`] said): `Some` replaces it by those statements.
    fn splice_after(&mut self, st: &mut Stmt, at: usize) -> Result<Option<Vec<Stmt>>, Self::Error> {
        let _ = (st, at);
        Ok(None)
    }

    /// A block (a body entered, or the walked block itself) before its statements, in the
    /// scope of the statement holding it; [`Flow::Skip`]: none of them (the block may have been
    /// rewritten here). [`VisitorMut::block`] follows either way.
    fn block_start(&mut self, body: &mut Vec<Stmt>) -> Result<Flow, Self::Error> {
        let _ = body;
        Ok(Flow::Descend)
    }

    /// A block whose statements were all walked, in the scope of the statement holding it.
    fn block(&mut self, body: &mut Vec<Stmt>) -> Result<(), Self::Error> {
        let _ = body;
        Ok(())
    }
}

/// Walks `body` with `v`, then calls [`VisitorMut::block`] on it (see [`VisitorMut`]).
pub fn visit_mut<V: VisitorMut + ?Sized>(body: &mut Vec<Stmt>, v: &mut V) -> Result<(), V::Error> {
    let mut at = if v.block_start(body)? == Flow::Skip {
        body.len()
    } else {
        0
    };
    while at < body.len() {
        if let Some(new) = v.splice(&mut body[at], at)? {
            let n = new.len();
            body.splice(at..at + 1, new);
            at += n;
            continue;
        }
        visit_stmt_mut(&mut body[at], at, v)?;
        match v.splice_after(&mut body[at], at)? {
            Some(new) => {
                let n = new.len();
                body.splice(at..at + 1, new);
                at += n;
            }
            None => at += 1,
        }
    }
    v.block(body)
}

/// Walks one statement (at index `at` of its block) and its bodies with `v`: [`visit_mut`]
/// without a block of its own (so not offered to [`VisitorMut::splice`] and
/// [`VisitorMut::splice_after`]).
pub fn visit_stmt_mut<V: VisitorMut + ?Sized>(
    st: &mut Stmt,
    at: usize,
    v: &mut V,
) -> Result<(), V::Error> {
    if v.stmt(st, at)? == Flow::Skip {
        return Ok(());
    }
    let bodies = st.children().count();
    for i in 0..bodies {
        if v.enter(st, i)? == Flow::Skip {
            continue;
        }
        // `leave` may have replaced the statement by one with fewer bodies.
        let Some(child) = st.children_mut().nth(i) else {
            break;
        };
        visit_mut(child, v)?;
        v.leave(st, i)?;
    }
    Ok(())
}

/// The block holding the first statement (outer ones first, in block order) for which `pred`
/// holds, and the statement's index in it.
pub fn find_mut<'a>(
    body: &'a mut Vec<Stmt>,
    pred: &mut dyn FnMut(&Stmt) -> bool,
) -> Option<(&'a mut Vec<Stmt>, usize)> {
    /// The path to the statement: (statement, body) per block entered, then its index.
    fn path(
        body: &[Stmt],
        pred: &mut dyn FnMut(&Stmt) -> bool,
        to: &mut Vec<(usize, usize)>,
    ) -> Option<usize> {
        for (at, st) in body.iter().enumerate() {
            if pred(st) {
                return Some(at);
            }
            for (i, child) in st.children().enumerate() {
                to.push((at, i));
                if let Some(found) = path(child, pred, to) {
                    return Some(found);
                }
                to.pop();
            }
        }
        None
    }
    let mut to = Vec::new();
    let at = path(body, pred, &mut to)?;
    let mut block = body;
    for (st, i) in to {
        block = block[st]
            .children_mut()
            .nth(i)
            .expect("the path found above");
    }
    Some((block, at))
}

/// Bytes of reduction scratch (shared memory) per thread of the block that `body`'s block
/// reductions need: one 8-byte slot per thread for [`Stmt::BlockReduce`], one 12-byte slot
/// (mean, m2, count) for [`Stmt::BlockWelford`]; None without either.
pub fn reduce_scratch_per_thread(body: &[Stmt]) -> Option<i64> {
    let mut bytes = None;
    for_each_stmt(body, &mut |s| match s {
        Stmt::BlockReduce { .. } => bytes = bytes.max(Some(8)),
        Stmt::BlockWelford { .. } => bytes = bytes.max(Some(12)),
        // (Split-K sums fragments through the workspace: no scratch.)
        Stmt::GridReduce(g) if g.split_k.is_none() => bytes = bytes.max(Some(8)),
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

    /// Records the scope of every statement: the loops around it and, inside warp roles,
    /// which branch; the consumers' branch skipped on request.
    struct Scopes<'a> {
        around: Vec<String>,
        seen: Vec<(String, Vec<String>)>,
        /// Each statement once its bodies were walked.
        after: Vec<String>,
        skip_consumers: bool,
        k: &'a Kernel,
    }

    impl<'a, 's> Visitor<'s> for Scopes<'a> {
        fn stmt(&mut self, st: &'s Stmt, at: usize) -> Flow {
            self.seen.push((
                format!("{at}: {}", self.k.stmt_head(st)),
                self.around.clone(),
            ));
            Flow::Descend
        }

        fn enter(&mut self, st: &'s Stmt, body: usize) -> Flow {
            match st {
                Stmt::Loop(l) => self.around.push(l.var.clone()),
                Stmt::WarpRoles(_) if body == 1 && self.skip_consumers => return Flow::Skip,
                Stmt::WarpRoles(_) => self.around.push(["producer", "consumer"][body].into()),
                _ => {}
            }
            Flow::Descend
        }

        fn leave(&mut self, st: &'s Stmt, _body: usize) {
            if matches!(st, Stmt::Loop(_) | Stmt::WarpRoles(_)) {
                self.around.pop();
            }
        }

        fn after(&mut self, st: &'s Stmt, at: usize) {
            self.after.push(format!("{at}: {}", self.k.stmt_head(st)));
        }
    }

    #[test]
    fn a_visitor_sees_each_statement_in_the_scope_its_hooks_pushed() {
        let body = sample();
        let k = kernel(Vec::new());
        let mut v = Scopes {
            around: Vec::new(),
            seen: Vec::new(),
            after: Vec::new(),
            skip_consumers: false,
            k: &k,
        };
        visit(&body, &mut v);
        let seen: Vec<String> = v
            .seen
            .iter()
            .map(|(s, around)| format!("{s} [{}]", around.join(" ")))
            .collect();
        assert_eq!(
            seen,
            [
                "0: __syncthreads() []",
                "1: for i in 4 @Serial key 0: []",
                "0: if i < 2: [i]",
                "0: __syncthreads() [i]",
                "1: bulk_commit_group [i]",
                "0: let e = 0 [i]",
                "1: bulk_commit_group [i]",
                "2: producer warps (if warp): []",
                "0: for p in 4 @Serial key 0: [producer]",
                "0: __syncthreads() [producer p]",
                "0: let c = 0 [consumer]",
                "1: __syncthreads() [consumer]",
            ]
        );
        assert!(v.around.is_empty(), "every scope pushed was popped");
        // Inner statements first: a statement is done after its bodies.
        assert_eq!(
            v.after[..6],
            [
                "0: __syncthreads()",
                "0: __syncthreads()",
                "1: bulk_commit_group",
                "0: let e = 0",
                "0: if i < 2:",
                "1: bulk_commit_group",
            ]
        );
        assert_eq!(v.after.len(), 12);
        assert_eq!(v.after[11], "2: producer warps (if warp):");
        let mut v = Scopes {
            around: Vec::new(),
            seen: Vec::new(),
            after: Vec::new(),
            skip_consumers: true,
            k: &k,
        };
        visit(&body, &mut v);
        assert_eq!(v.seen.len(), 10, "the consumers' two statements skipped");
        assert!(v.around.is_empty(), "no leave for a body not entered");
    }

    /// Numbers each `let` by the loops around it, closes each loop's body with a barrier on
    /// leaving it, and drops a block's trailing `bulk_commit_group`; fails on a `let` named `x`.
    #[derive(Default)]
    struct Depths {
        depth: i64,
        blocks: usize,
    }

    impl VisitorMut for Depths {
        type Error = String;

        fn splice(&mut self, st: &mut Stmt, at: usize) -> Result<Option<Vec<Stmt>>, String> {
            // A barrier after the first statement of a block becomes two (not walked again).
            Ok((*st == Stmt::Sync && at > 0).then(|| vec![Stmt::WgmmaFence, Stmt::Sync]))
        }

        fn stmt(&mut self, st: &mut Stmt, _at: usize) -> Result<Flow, String> {
            match st {
                Stmt::Let { var, .. } if var == "x" => Err(format!("let {var}")),
                Stmt::Let { value, .. } => {
                    *value = Val::Int(self.depth);
                    Ok(Flow::Descend)
                }
                // Replaced in place: its body is the new statement's (none).
                Stmt::Loop(l) if l.var == "p" => {
                    *st = Stmt::ClusterSync;
                    Ok(Flow::Descend)
                }
                _ => Ok(Flow::Descend),
            }
        }

        fn splice_after(&mut self, st: &mut Stmt, _at: usize) -> Result<Option<Vec<Stmt>>, String> {
            // An `if` (its branches done) is followed by a fence.
            Ok(matches!(st, Stmt::If { .. }).then(|| vec![st.clone(), Stmt::FenceProxyAsync]))
        }

        fn enter(&mut self, st: &Stmt, _body: usize) -> Result<Flow, String> {
            if matches!(st, Stmt::Loop(_)) {
                self.depth += 1;
            }
            Ok(Flow::Descend)
        }

        fn leave(&mut self, st: &mut Stmt, _body: usize) -> Result<(), String> {
            if let Stmt::Loop(l) = st {
                self.depth -= 1;
                l.body.push(Stmt::Sync);
            }
            Ok(())
        }

        fn block(&mut self, body: &mut Vec<Stmt>) -> Result<(), String> {
            self.blocks += 1;
            if body.last() == Some(&Stmt::BulkCommit) {
                body.pop();
            }
            Ok(())
        }
    }

    #[test]
    fn an_in_place_visitor_rewrites_in_scope_and_edits_blocks_after_their_statements() {
        let mut body = sample();
        let mut v = Depths::default();
        let r = visit_mut(&mut body, &mut v);
        assert_eq!(r, Ok(()));
        assert_eq!(
            text(&body),
            "  __syncthreads()
  for i in 4 @Serial key 0:
    if i < 2:
      __syncthreads()
    else:
      let e = 1
    fence.proxy.async.shared::cta
    __syncthreads()
  producer warps (if warp):
    cluster_sync
  consumer warps (128 threads, barriers are named):
    let c = 0
    wgmma.fence
    __syncthreads()
"
        );
        // The kernel's block, loop i's, then, els, producer, consumer.
        assert_eq!(v.blocks, 6);
        assert_eq!(v.depth, 0);
        let mut body = vec![serial("i", vec![let_("x"), let_("y")]), let_("z")];
        let r = visit_mut(&mut body, &mut Depths::default());
        assert_eq!(r, Err("let x".to_string()));
        assert_eq!(
            text(&body),
            "  for i in 4 @Serial key 0:\n    let x = 0\n    let y = 0\n  let z = 0\n",
            "nothing after the error is visited"
        );
    }

    #[test]
    fn find_mut_reaches_the_block_of_the_first_statement_outer_ones_first() {
        let mut body = sample();
        let (block, at) = find_mut(&mut body, &mut |s| *s == Stmt::BulkCommit).expect("found");
        // The `if`'s `then` holds the first, before the loop body's own.
        assert_eq!((block.len(), at), (2, 1));
        block.insert(at, Stmt::WgmmaFence);
        let (block, at) = find_mut(
            &mut body,
            &mut |s| matches!(s, Stmt::Let { var, .. } if var == "c"),
        )
        .expect("found");
        block.remove(at);
        assert_eq!(
            text(&body),
            "  __syncthreads()
  for i in 4 @Serial key 0:
    if i < 2:
      __syncthreads()
      wgmma.fence
      bulk_commit_group
    else:
      let e = 0
    bulk_commit_group
  producer warps (if warp):
    for p in 4 @Serial key 0:
      __syncthreads()
  consumer warps (128 threads, barriers are named):
    __syncthreads()
"
        );
        assert!(find_mut(&mut body, &mut |s| *s == Stmt::ClusterSync).is_none());
    }

    /// Replaces each block that holds a `bulk_commit_group` by one `cluster_sync` before its
    /// statements are walked, counting the statements walked and the blocks finished.
    #[derive(Default)]
    struct Blocks {
        walked: usize,
        finished: usize,
    }

    impl VisitorMut for Blocks {
        type Error = Infallible;

        fn block_start(&mut self, body: &mut Vec<Stmt>) -> Result<Flow, Infallible> {
            if !body.contains(&Stmt::BulkCommit) {
                return Ok(Flow::Descend);
            }
            *body = vec![Stmt::ClusterSync];
            Ok(Flow::Skip)
        }

        fn stmt(&mut self, _st: &mut Stmt, _at: usize) -> Result<Flow, Infallible> {
            self.walked += 1;
            Ok(Flow::Descend)
        }

        fn block(&mut self, _body: &mut Vec<Stmt>) -> Result<(), Infallible> {
            self.finished += 1;
            Ok(())
        }
    }

    #[test]
    fn a_block_may_be_rewritten_or_skipped_before_its_statements() {
        let mut body = sample();
        let mut v = Blocks::default();
        let Ok(()) = visit_mut(&mut body, &mut v);
        // Loop i's body holds a commit: replaced whole, nothing in it walked.
        assert_eq!(
            text(&body),
            "  __syncthreads()
  for i in 4 @Serial key 0:
    cluster_sync
  producer warps (if warp):
    for p in 4 @Serial key 0:
      __syncthreads()
  consumer warps (128 threads, barriers are named):
    let c = 0
    __syncthreads()
"
        );
        // sync, loop i, roles, loop p, its sync, let c, sync.
        assert_eq!(v.walked, 7);
        // Loop i's (skipped, still finished), loop p's, producer, consumer, the kernel's.
        assert_eq!(v.finished, 5);
        // Read-only: a block skipped before its statements.
        struct Count(usize);
        impl<'a> Visitor<'a> for Count {
            fn block_start(&mut self, body: &'a [Stmt]) -> Flow {
                if body.iter().any(|s| matches!(s, Stmt::Let { .. })) {
                    Flow::Skip
                } else {
                    Flow::Descend
                }
            }
            fn stmt(&mut self, _st: &'a Stmt, _at: usize) -> Flow {
                self.0 += 1;
                Flow::Descend
            }
        }
        let mut count = Count(0);
        visit(&sample(), &mut count);
        // The `if`'s else and the consumers' branch hold lets: sync, loop i, if, its two
        // statements, commit, roles, loop p, its sync.
        assert_eq!(count.0, 9);
    }
}
