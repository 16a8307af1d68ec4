//! Index arithmetic of the kernel IR: [`Val`] trees, their evaluation, substitution, the
//! linear coefficient of a variable, and their text (IR dump and CUDA).

use crate::fusion::ParallelType;
use crate::plan::SizeExpr;
use crate::text::write_int;

/// Integer index arithmetic.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Val {
    Int(i64),
    /// A size parameter (`M`).
    Size(String),
    /// A loop index variable, by name.
    Var(String),
    /// threadIdx.x, blockIdx.y, ...
    Hw(ParallelType),
    Add(Box<Val>, Box<Val>),
    Sub(Box<Val>, Box<Val>),
    Mul(Box<Val>, Box<Val>),
    Div(Box<Val>, Box<Val>),
    Mod(Box<Val>, Box<Val>),
    CeilDiv(Box<Val>, Box<Val>),
    Lt(Box<Val>, Box<Val>),
    Eq(Box<Val>, Box<Val>),
    And(Box<Val>, Box<Val>),
    /// Bitwise exclusive or (the shared-memory swizzle of TMA boxes).
    Xor(Box<Val>, Box<Val>),
    /// The smaller of two values (the last, partial group of a persistent grid's raster).
    Min(Box<Val>, Box<Val>),
    /// CTAs in the (one-dimensional) grid, `gridDim.x`: a persistent kernel's stride over its
    /// tiles, fixed only at launch.
    Ctas,
    True,
    /// The thread's warp index in the block, made warp-uniform (`__shfl_sync` from lane 0):
    /// predicates around warp-collective instructions are built from it.
    Warp,
    /// `elect.sync`: true on exactly one lane of the (whole, converged) warp.
    Elect,
    /// An index read from data (`gather`, `index_select`): element `.1` of the integer fusion
    /// input `.0` (the kernel parameter, in global memory), clamped into `[0, .2)` so that the
    /// access it moves never leaves its tensor. A binary node over `.1` and `.2`. Also the key
    /// tile a document-masked loop visits (`.0` the shared list [`super::VISITED_TABLE`]).
    IndexIn(String, Box<Val>, Box<Val>),
    /// Whether the float scalar parameter `.0` (a scalar input, passed by value) is above 0
    /// (`scale > 0.0f`; false for NaN): a uniform branch between two forms of the code that
    /// depend on its sign (pass `scaled_max`: a row maximum taken before the scale).
    Positive(String),
}

#[allow(clippy::should_implement_trait)]
impl Val {
    pub fn add(a: Val, b: Val) -> Val {
        Val::Add(Box::new(a), Box::new(b))
    }
    pub fn mul(a: Val, b: Val) -> Val {
        Val::Mul(Box::new(a), Box::new(b))
    }
    pub fn div(a: Val, b: Val) -> Val {
        Val::Div(Box::new(a), Box::new(b))
    }
    pub fn rem(a: Val, b: Val) -> Val {
        Val::Mod(Box::new(a), Box::new(b))
    }
    pub fn ceil_div(a: Val, b: Val) -> Val {
        Val::CeilDiv(Box::new(a), Box::new(b))
    }
    pub fn lt(a: Val, b: Val) -> Val {
        Val::Lt(Box::new(a), Box::new(b))
    }
    pub fn sub(a: Val, b: Val) -> Val {
        Val::Sub(Box::new(a), Box::new(b))
    }
    pub fn min(a: Val, b: Val) -> Val {
        Val::Min(Box::new(a), Box::new(b))
    }
    pub fn eq(a: Val, b: Val) -> Val {
        Val::Eq(Box::new(a), Box::new(b))
    }
    pub fn and(a: Val, b: Val) -> Val {
        match (a, b) {
            (Val::True, x) | (x, Val::True) => x,
            (a, b) => Val::And(Box::new(a), Box::new(b)),
        }
    }
    pub fn all(vals: impl IntoIterator<Item = Val>) -> Val {
        vals.into_iter().fold(Val::True, Val::and)
    }

    pub fn from_size(e: &SizeExpr) -> Val {
        match e {
            SizeExpr::Const(c) => Val::Int(*c),
            SizeExpr::Sym(s) => Val::Size(s.clone()),
            // `N - 2` (a slice's extent) as written.
            SizeExpr::Add(a, b) => match **b {
                SizeExpr::Const(c) if c < 0 => Val::sub(Val::from_size(a), Val::Int(-c)),
                _ => Val::add(Val::from_size(a), Val::from_size(b)),
            },
            SizeExpr::Mul(a, b) => Val::mul(Val::from_size(a), Val::from_size(b)),
            SizeExpr::CeilDiv(a, b) => Val::ceil_div(Val::from_size(a), Val::from_size(b)),
            SizeExpr::Max(a, _) => Val::from_size(a),
        }
    }

    /// The two operands of a binary node.
    pub fn operands(&self) -> Option<(&Val, &Val)> {
        match self {
            Val::Add(a, b)
            | Val::Sub(a, b)
            | Val::Mul(a, b)
            | Val::Div(a, b)
            | Val::Mod(a, b)
            | Val::CeilDiv(a, b)
            | Val::Lt(a, b)
            | Val::Eq(a, b)
            | Val::And(a, b)
            | Val::Xor(a, b)
            | Val::Min(a, b)
            | Val::IndexIn(_, a, b) => Some((a, b)),
            _ => None,
        }
    }

    /// The same binary node over new operands.
    pub fn with_operands(&self, a: Val, b: Val) -> Val {
        let (a, b) = (Box::new(a), Box::new(b));
        match self {
            Val::Add(..) => Val::Add(a, b),
            Val::Sub(..) => Val::Sub(a, b),
            Val::Mul(..) => Val::Mul(a, b),
            Val::Div(..) => Val::Div(a, b),
            Val::Mod(..) => Val::Mod(a, b),
            Val::CeilDiv(..) => Val::CeilDiv(a, b),
            Val::Lt(..) => Val::Lt(a, b),
            Val::Eq(..) => Val::Eq(a, b),
            Val::And(..) => Val::And(a, b),
            Val::Xor(..) => Val::Xor(a, b),
            Val::Min(..) => Val::Min(a, b),
            Val::IndexIn(array, ..) => Val::IndexIn(array.clone(), a, b),
            v => v.clone(),
        }
    }

    /// The value, with `leaf` giving the value of each leaf that is not a constant (`None`: not
    /// known, and so neither is the whole; so is a division by zero or an overflow). Comparisons
    /// and `&&` are 1 or 0.
    pub fn eval_with(&self, leaf: &dyn Fn(&Val) -> Option<i64>) -> Option<i64> {
        let bin = |f: fn(i64, i64) -> Option<i64>| {
            let (a, b) = self.operands()?;
            f(a.eval_with(leaf)?, b.eval_with(leaf)?)
        };
        match self {
            Val::Int(i) => Some(*i),
            Val::True => Some(1),
            Val::Add(..) => bin(i64::checked_add),
            Val::Sub(..) => bin(i64::checked_sub),
            Val::Mul(..) => bin(i64::checked_mul),
            Val::Div(..) => bin(i64::checked_div),
            Val::Mod(..) => bin(i64::checked_rem),
            Val::CeilDiv(..) => bin(|a, b| a.checked_add(b.checked_sub(1)?)?.checked_div(b)),
            Val::Lt(..) => bin(|a, b| Some((a < b) as i64)),
            Val::Eq(..) => bin(|a, b| Some((a == b) as i64)),
            Val::And(..) => bin(|a, b| Some((a != 0 && b != 0) as i64)),
            Val::Xor(..) => bin(|a, b| Some(a ^ b)),
            Val::Min(..) => bin(|a, b| Some(a.min(b))),
            // Data: known only at run time.
            Val::IndexIn(..) | Val::Positive(_) => None,
            Val::Size(_) | Val::Var(_) | Val::Hw(_) | Val::Warp | Val::Elect | Val::Ctas => {
                leaf(self)
            }
        }
    }

    /// Whether `leaf` holds for some leaf of the tree.
    pub fn any_leaf(&self, leaf: &dyn Fn(&Val) -> bool) -> bool {
        match self.operands() {
            Some((a, b)) => a.any_leaf(leaf) || b.any_leaf(leaf),
            None => leaf(self),
        }
    }

    /// Replaces hardware index `p` (e.g. `threadIdx.x`) by `with`.
    pub fn subst_hw(&self, p: ParallelType, with: &Val) -> Val {
        match (self, self.operands()) {
            (Val::Hw(q), _) if *q == p => with.clone(),
            (_, Some((a, b))) => self.with_operands(a.subst_hw(p, with), b.subst_hw(p, with)),
            (v, None) => v.clone(),
        }
    }

    /// Replaces variable `name` by `with`.
    pub fn subst(&self, name: &str, with: &Val) -> Val {
        match (self, self.operands()) {
            (Val::Var(n), _) if n == name => with.clone(),
            (_, Some((a, b))) => self.with_operands(a.subst(name, with), b.subst(name, with)),
            (v, None) => v.clone(),
        }
    }

    /// Replaces every variable that `with` names by its value, in one rebuild of the tree (the
    /// values themselves are not searched: what substituting the variables one after the other
    /// gives when no value mentions one of them).
    pub fn subst_vars(&self, with: &[(&str, &Val)]) -> Val {
        match (self, self.operands()) {
            (Val::Var(n), _) => match with.iter().find(|(name, _)| name == n) {
                Some((_, v)) => (*v).clone(),
                None => self.clone(),
            },
            (_, Some((a, b))) => self.with_operands(a.subst_vars(with), b.subst_vars(with)),
            (v, None) => v.clone(),
        }
    }

    /// Replaces each size symbol that `sizes` gives a value by that value.
    pub fn subst_sizes(&self, sizes: &std::collections::BTreeMap<String, i64>) -> Val {
        match (self, self.operands()) {
            (Val::Size(s), _) => sizes.get(s).map_or_else(|| self.clone(), |&v| Val::Int(v)),
            (_, Some((a, b))) => self.with_operands(a.subst_sizes(sizes), b.subst_sizes(sizes)),
            (v, None) => v.clone(),
        }
    }

    pub fn mentions(&self, name: &str) -> bool {
        self.any_leaf(&|v| matches!(v, Val::Var(n) if n == name))
    }

    /// The value as a sum of terms `c * t` (`+`, `-` and products by a constant distributed;
    /// each `t` anything else: a leaf, a quotient, a remainder), constants as `c * 1`; `None`
    /// on an overflow of a coefficient.
    pub fn affine_terms(&self) -> Option<Vec<(i64, Val)>> {
        let mut terms = Vec::new();
        self.collect_terms(1, &mut terms)?;
        Some(terms)
    }

    fn collect_terms(&self, scale: i64, terms: &mut Vec<(i64, Val)>) -> Option<()> {
        match self {
            Val::Int(k) => terms.push((scale.checked_mul(*k)?, Val::Int(1))),
            Val::Add(a, b) => {
                a.collect_terms(scale, terms)?;
                b.collect_terms(scale, terms)?;
            }
            Val::Sub(a, b) => {
                a.collect_terms(scale, terms)?;
                b.collect_terms(scale.checked_neg()?, terms)?;
            }
            Val::Mul(a, b) => match (&**a, &**b) {
                (x, Val::Int(k)) | (Val::Int(k), x) => {
                    x.collect_terms(scale.checked_mul(*k)?, terms)?
                }
                _ => terms.push((scale, self.clone())),
            },
            _ => terms.push((scale, self.clone())),
        }
        Some(())
    }

    /// Whether `name` is the only variable, size or hardware index in the value (its other
    /// leaves constants): once `name` is a constant, so is the value.
    pub fn only_mentions(&self, name: &str) -> bool {
        !self.any_leaf(&|v| {
            !matches!(v, Val::Int(_) | Val::True) && !matches!(v, Val::Var(n) if n == name)
        })
    }

    /// `c` when the value is `c * name + (terms without name)` with a constant `c` (0 when
    /// `name` does not appear); `None` when `name` appears in any other way (under a division,
    /// a remainder, a product with another variable).
    pub fn linear_coefficient(&self, name: &str) -> Option<i64> {
        match self {
            Val::Var(n) if n == name => Some(1),
            Val::Add(a, b) => a
                .linear_coefficient(name)?
                .checked_add(b.linear_coefficient(name)?),
            Val::Sub(a, b) => a
                .linear_coefficient(name)?
                .checked_sub(b.linear_coefficient(name)?),
            Val::Mul(a, b) => match (&**a, &**b) {
                (x, Val::Int(k)) | (Val::Int(k), x) => x.linear_coefficient(name)?.checked_mul(*k),
                _ => (!self.mentions(name)).then_some(0),
            },
            _ => (!self.mentions(name)).then_some(0),
        }
    }

    fn prec(&self) -> u8 {
        match self {
            Val::And(..) => 1,
            Val::Lt(..) | Val::Eq(..) => 2,
            Val::Add(..) | Val::Sub(..) => 3,
            Val::Mul(..) | Val::Div(..) | Val::Mod(..) => 4,
            _ => 5,
        }
    }

    /// C-like text; `hw` names hardware indices.
    /// Readable text (the kernel IR dump).
    pub fn text(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, false);
        out
    }

    /// Appends the expression to `out`; `cuda` selects the CUDA spelling of hardware indices
    /// and ceiling division. One buffer, no allocation per node: this runs for every access of
    /// every pass dump.
    pub fn write(&self, out: &mut String, cuda: bool) {
        let bin = |a: &Val, op: &str, b: &Val, p: u8, out: &mut String| {
            let (pl, pr) = (a.prec() < p, b.prec() <= p);
            if pl {
                out.push('(');
            }
            a.write(out, cuda);
            if pl {
                out.push(')');
            }
            out.push(' ');
            out.push_str(op);
            out.push(' ');
            if pr {
                out.push('(');
            }
            b.write(out, cuda);
            if pr {
                out.push(')');
            }
        };
        match self {
            Val::Int(i) => write_int(*i, out),
            Val::Size(s) | Val::Var(s) => out.push_str(s),
            Val::Hw(p) => {
                let name = p.cuda_index().unwrap_or("0");
                if cuda {
                    out.push_str("((index_t)");
                    out.push_str(name);
                    out.push(')');
                } else {
                    out.push_str(name);
                }
            }
            Val::Add(a, b) => bin(a, "+", b, 3, out),
            Val::Sub(a, b) => bin(a, "-", b, 3, out),
            Val::Mul(a, b) => bin(a, "*", b, 4, out),
            Val::Div(a, b) => bin(a, "/", b, 4, out),
            Val::Mod(a, b) => bin(a, "%", b, 4, out),
            Val::CeilDiv(a, b) | Val::Min(a, b) => {
                out.push_str(match (self, cuda) {
                    (Val::Min(..), true) => "hf_min<index_t>(",
                    (Val::Min(..), false) => "min(",
                    (_, true) => "hf_ceil_div<index_t>(",
                    (_, false) => "ceilDiv(",
                });
                a.write(out, cuda);
                out.push_str(", ");
                b.write(out, cuda);
                out.push(')');
            }
            Val::Ctas => out.push_str(if cuda {
                "((index_t)gridDim.x)"
            } else {
                "gridDim.x"
            }),
            Val::Lt(a, b) => bin(a, "<", b, 2, out),
            Val::Eq(a, b) => bin(a, "==", b, 2, out),
            Val::And(a, b) => bin(a, "&&", b, 1, out),
            // Always parenthesized: C binds `^` below `==` and `<`.
            Val::Xor(a, b) => {
                out.push('(');
                bin(a, "^", b, 5, out);
                out.push(')');
            }
            Val::True => out.push_str("true"),
            Val::Warp => out.push_str(if cuda { "hf_warp" } else { "warp" }),
            Val::Elect => out.push_str(if cuda {
                "hf_elect_one()"
            } else {
                "elect_one()"
            }),
            Val::Positive(param) => {
                out.push_str(if cuda { "(" } else { "positive(" });
                out.push_str(param);
                out.push_str(if cuda { " > 0.0f)" } else { ")" });
            }
            Val::IndexIn(array, i, n) => {
                out.push_str(if cuda {
                    "hf_index_in<index_t>("
                } else {
                    "index_in("
                });
                out.push_str(array);
                out.push('[');
                i.write(out, cuda);
                out.push_str("], ");
                n.write(out, cuda);
                out.push(')');
            }
        }
    }

    /// Whether the warp index appears (the kernel then computes it once at entry).
    pub fn mentions_warp(&self) -> bool {
        self.any_leaf(&|v| matches!(v, Val::Warp))
    }

    /// Whether a ceiling division appears (the CUDA prelude then needs its helper).
    pub fn has_ceil_div(&self) -> bool {
        match self.operands() {
            Some((a, b)) => {
                matches!(self, Val::CeilDiv(..)) || a.has_ceil_div() || b.has_ceil_div()
            }
            None => false,
        }
    }

    /// Whether an index read from data appears (the CUDA prelude then needs its helper).
    pub fn has_index_in(&self) -> bool {
        match self.operands() {
            Some((a, b)) => {
                matches!(self, Val::IndexIn(..)) || a.has_index_in() || b.has_index_in()
            }
            None => false,
        }
    }

    /// Whether a minimum appears (the CUDA prelude then needs its helper).
    pub fn has_min(&self) -> bool {
        match self.operands() {
            Some((a, b)) => matches!(self, Val::Min(..)) || a.has_min() || b.has_min(),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Val;

    fn var(n: &str) -> Val {
        Val::Var(n.into())
    }

    #[test]
    fn the_linear_coefficient_of_a_variable_is_found_through_sums_and_constant_products() {
        // (slot % 3) * 8192 + (m * 256 + k) * 16: k steps by 16, slot does not appear linearly.
        let slot = Val::mul(Val::rem(var("slot"), Val::Int(3)), Val::Int(8192));
        let v = Val::add(
            slot,
            Val::mul(
                Val::add(Val::mul(var("m"), Val::Int(256)), var("k")),
                Val::Int(16),
            ),
        );
        assert_eq!(v.linear_coefficient("k"), Some(16));
        assert_eq!(v.linear_coefficient("m"), Some(4096));
        assert_eq!(v.linear_coefficient("absent"), Some(0));
        assert_eq!(v.linear_coefficient("slot"), None);
        // 3 * k - m: 3; m - 2k: -2; k * m and k / 2 are not linear in k.
        let sub = |a, b| Val::Sub(Box::new(a), Box::new(b));
        assert_eq!(
            sub(Val::mul(Val::Int(3), var("k")), var("m")).linear_coefficient("k"),
            Some(3)
        );
        assert_eq!(
            sub(var("m"), Val::mul(var("k"), Val::Int(2))).linear_coefficient("k"),
            Some(-2)
        );
        assert_eq!(Val::mul(var("k"), var("m")).linear_coefficient("k"), None);
        assert_eq!(
            Val::div(var("k"), Val::Int(2)).linear_coefficient("k"),
            None
        );
    }

    #[test]
    fn affine_terms_distribute_constant_products_and_keep_quotients_whole() {
        // ((d / 4 * 2 + g) * 256 + d % 4) * 16 - 3: a tile of two slabs, q's rows of group g.
        let d = || var("d");
        let v = Val::Sub(
            Box::new(Val::mul(
                Val::add(
                    Val::mul(
                        Val::add(Val::mul(Val::div(d(), Val::Int(4)), Val::Int(2)), var("g")),
                        Val::Int(256),
                    ),
                    Val::rem(d(), Val::Int(4)),
                ),
                Val::Int(16),
            )),
            Box::new(Val::Int(3)),
        );
        assert_eq!(
            v.affine_terms(),
            Some(vec![
                (8192, Val::div(d(), Val::Int(4))),
                (4096, var("g")),
                (16, Val::rem(d(), Val::Int(4))),
                (-3, Val::Int(1)),
            ])
        );
        assert!(Val::div(d(), Val::Int(4)).only_mentions("d"));
        assert!(!Val::div(d(), var("g")).only_mentions("d"));
        assert!(!Val::rem(d(), Val::Size("T".into())).only_mentions("d"));
        assert_eq!(
            Val::mul(Val::Int(i64::MAX), Val::mul(d(), Val::Int(2))).affine_terms(),
            None
        );
    }
}
