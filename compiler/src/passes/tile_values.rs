//! Pass `tile_values`: a persistent kernel computes each tile's indices once, at the top of the
//! tile, broadcast from lane 0.
//!
//! Requires: `persistent` and `simplify` (the values it moves are in their final form). The
//! tile loop's grid-bound indices are the grouped raster of the tile (divisions and remainders
//! by run-time values), written into every index that needs them. In a tensor-core kernel only
//! the epilogue's TMA stores read them, after the k loop, so ptxas computes them there: on the
//! elected lane between one tile's last wgmma and the next tile's first, where the whole warp
//! group waits for it (measured on the H100: 0.3-0.4% of step 15 at 4096^3).
//!
//! Guarantees: the same values. In each tile loop that every lane of a warp runs (not under a
//! condition: not the producer's elected lane), every maximal subexpression that mentions the
//! tile variable, no variable bound in the loop's body, and divides it by a run-time value,
//! takes such a remainder or a minimum of it becomes a `let` at the top of the body, `broadcast` from lane 0 (which pins it
//! there, before the k loop, and tells ptxas that it is warp-uniform). Equal subexpressions share
//! one `let`. A tile copy's global element (not in the CUDA: the copy reads its coordinates) is
//! left as it is.
//!
//! Emits: `Stmt::Let { broadcast: true, .. }` named after the tile variable (`tile_v0`, ...).

use super::context::{Change, Ctx};
use crate::diag::Diagnostic;
use crate::kir::{for_each_stmt, CopyKind, Flow, Kernel, Stmt, Val};

pub fn used(cx: &Ctx) -> bool {
    cx.fusion.persistent.is_some()
}

pub fn run(cx: &mut Ctx, k: &mut Kernel) -> Result<Change, Diagnostic> {
    let Some(tile) = k.persistent.as_ref().map(|p| p.var.clone()) else {
        return Ok(Change::Unchanged);
    };
    let mut changed = false;
    hoist_in(cx, &mut k.body, &tile, &mut changed);
    Ok(Change::from_changed(changed))
}

/// The variables a statement binds (what varies inside a tile loop's body).
fn bound(s: &Stmt) -> Vec<String> {
    match s {
        Stmt::Loop(l) => std::iter::once(&l.var)
            .chain(l.digits.iter().map(|d| &d.var))
            .cloned()
            .collect(),
        Stmt::Let { var, .. } => vec![var.clone()],
        _ => Vec::new(),
    }
}

/// Visits the loops every lane runs: through loops and both warp roles, not into conditions.
fn hoist_in(cx: &mut Ctx, body: &mut [Stmt], tile: &str, changed: &mut bool) {
    crate::kir::for_each_stmt_mut(body, &mut |s| match s {
        Stmt::Loop(l) if l.var == tile && l.digits.is_empty() => {
            let mut varying = Vec::new();
            for_each_stmt(&l.body, &mut |s| varying.extend(bound(s)));
            let mut h = Hoister {
                cx: &mut *cx,
                tile,
                varying: &varying,
                lets: Vec::new(),
            };
            for s in &mut l.body {
                let tile_src = match s {
                    Stmt::TmaLoad(t) if matches!(t.kind, CopyKind::Tile { .. }) => {
                        t.src.index.take()
                    }
                    _ => None,
                };
                s.map_vals(&mut |v| h.root(v));
                if let (Stmt::TmaLoad(t), Some(src)) = (s, tile_src) {
                    t.src.index = Some(src);
                }
            }
            *changed |= !h.lets.is_empty();
            let lets = h.lets.into_iter().map(|(var, value)| Stmt::Let {
                var,
                value,
                broadcast: true,
            });
            l.body.splice(0..0, lets);
            Flow::Skip
        }
        Stmt::If { .. } => Flow::Skip,
        _ => Flow::Descend,
    });
}

/// Replaces the maximal movable, costly subexpressions of each value by `let`s.
struct Hoister<'a, 'f> {
    cx: &'a mut Ctx<'f>,
    tile: &'a str,
    varying: &'a [String],
    lets: Vec<(String, Val)>,
}

/// What [`Hoister::visit`] knows of a subexpression: computable at the top of the tile
/// (`movable`), mentions the tile, and divides it by a run-time value, takes such a remainder
/// or a minimum of it (`costly`).
#[derive(Clone, Copy)]
struct Props {
    movable: bool,
    tile: bool,
    costly: bool,
}

impl Hoister<'_, '_> {
    fn root(&mut self, v: &Val) -> Val {
        let (v, p) = self.visit(v);
        self.moved(v, p)
    }

    /// The value with the movable, costly subexpressions of its non-movable nodes replaced; a
    /// movable node is left whole for its parent to take.
    fn visit(&mut self, v: &Val) -> (Val, Props) {
        let Some((a, b)) = v.operands() else {
            let (movable, tile) = match v {
                Val::Var(n) => (!self.varying.contains(n), n == self.tile),
                _ => (!matches!(v, Val::Elect), false),
            };
            let p = Props {
                movable,
                tile,
                costly: false,
            };
            return (v.clone(), p);
        };
        let ((a, pa), (b, pb)) = (self.visit(a), self.visit(b));
        let tile = pa.tile || pb.tile;
        // (By a constant, ptxas multiplies and shifts: not worth a register.)
        let divides = match v {
            Val::Div(_, d) | Val::Mod(_, d) | Val::CeilDiv(_, d) => !matches!(**d, Val::Int(_)),
            _ => matches!(v, Val::Min(..)),
        };
        let p = Props {
            // An index read from data stays under the predicates of the access it moves (at the
            // top of a ragged tile its element may lie outside the index tensor).
            movable: pa.movable && pb.movable && !matches!(v, Val::IndexIn(..)),
            tile,
            costly: pa.costly || pb.costly || (tile && divides),
        };
        if p.movable {
            return (v.with_operands(a, b), p);
        }
        let (a, b) = (self.moved(a, pa), self.moved(b, pb));
        (v.with_operands(a, b), p)
    }

    /// `v`, or the `let` that holds it when it is worth one.
    fn moved(&mut self, v: Val, p: Props) -> Val {
        if !(p.movable && p.costly) {
            return v;
        }
        if let Some((var, _)) = self.lets.iter().find(|(_, value)| *value == v) {
            return Val::Var(var.clone());
        }
        let var = self
            .cx
            .fresh_name(&format!("{}_v{}", self.tile, self.lets.len()));
        self.lets.push((var.clone(), v));
        Val::Var(var)
    }
}
