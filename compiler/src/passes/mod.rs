//! The lowering pipeline: scheduled fusion → kernel IR → CUDA.
//!
//! [`PIPELINE`] lists every pass in order; each pass is a module whose doc comment says what it
//! requires, what it guarantees and what it emits. The kernel IR is printed after each pass.
//! A pass whose `applies` is false for the fusion (the TMA passes without copies, stores or
//! circular buffers; `persistent`, `mma`, `tile_values` without their schedule statements) is
//! skipped and not dumped; a pass that left the kernel as it found it sets
//! [`Ctx::kernel_unchanged`] and its dump is the previous one's text.
//!
//! The passes share two kinds of facts, kept apart as Cranelift keeps its analyses apart from
//! the IR: [`Ctx`], the loop-nest analyses every pass asks for, built up as the pipeline runs
//! (loop keys, [`Keys`]: a hash-consed [`KeyNode`] per loop with its name, extent, classes and
//! divisibility, computed once; the key of each axis; placements, set by `loop_nest`; each
//! tensor's buffer and the axes it spans, set by `allocation`; use lists; the plan's run-time
//! constraints; fresh names that step around every taken one), and the [`PipelinePlan`], an
//! argument whose use each pass's [`Run`] states.
//!
//! Lowering stays near-linear in the program's size: no pass searches the whole kernel per
//! statement (`reduction` finds every reduction's loop in one walk, `loop_nest` keeps the bit
//! sets of the reductions around each tensor and the loop tree's open-loop search between
//! calls), and maps keyed by compiler ids hash with FxHash, maps keyed by user names with the
//! seeded foldhash.

pub mod allocation;
pub mod indexing;
pub mod loop_nest;
pub mod mma;
pub mod online_softmax;
pub mod persistent;
pub mod predicate;
pub mod probe;
pub mod reduction;
pub mod simplify;
pub mod specialize;
pub mod sync;
pub mod tile_values;
pub mod tma;

use crate::diag::Diagnostic;
use crate::fusion::{Fusion, IterId, IterKind, IterOrigin, TensorId};
use crate::id::IdVec;
use crate::kir::{BufferId, Kernel};
use crate::plan::SizeExpr;
use rustc_hash::FxHashMap;
use std::collections::HashMap;

pub use tma::PipelinePlan;

pub struct Pass {
    pub name: &'static str,
    pub summary: &'static str,
    pub run: Run,
    /// Whether the pass runs for this fusion (passes for features a fusion does not use are
    /// skipped and not dumped).
    pub applies: fn(&Ctx) -> bool,
    /// The pass rewrites values inside statements and nothing else, so its dump has the same
    /// lines in the same order (`specialize`): the CUDA line map blames a line it changed on
    /// the pass that wrote the statement.
    pub in_place: bool,
}

fn always(_: &Ctx) -> bool {
    true
}

/// How a pass runs, which says what it does with the [`PipelinePlan`] (the analysis the passes
/// after `tma` share; see [`tma::pipeline_plan`]): the plan is an argument, not state on
/// [`Ctx`], so which pass computes it and which read it is written in [`PIPELINE`].
#[derive(Clone, Copy)]
pub enum Run {
    /// Neither reads nor computes the plan.
    Kernel(fn(&mut Ctx, &mut Kernel) -> Result<(), Diagnostic>),
    /// Computes the plan (`tma`); without this pass the plan is [`PipelinePlan::default`].
    Plans(fn(&mut Ctx, &mut Kernel) -> Result<PipelinePlan, Diagnostic>),
    /// Reads the plan.
    Reads(fn(&mut Ctx, &PipelinePlan, &mut Kernel) -> Result<(), Diagnostic>),
    /// Reads the plan and completes it (`allocation`: [`PipelinePlan::stage_elems`]).
    Completes(fn(&mut Ctx, &mut PipelinePlan, &mut Kernel) -> Result<(), Diagnostic>),
}

impl Pass {
    /// Runs the pass on `k`, handing it the plan as its [`Run`] says.
    pub fn run(
        &self,
        cx: &mut Ctx,
        plan: &mut PipelinePlan,
        k: &mut Kernel,
    ) -> Result<(), Diagnostic> {
        match self.run {
            Run::Kernel(run) => run(cx, k),
            Run::Plans(run) => {
                *plan = run(cx, k)?;
                Ok(())
            }
            Run::Reads(run) => run(cx, plan, k),
            Run::Completes(run) => run(cx, plan, k),
        }
    }
}

/// Every pass, in the order it runs.
pub const PIPELINE: &[Pass] = &[
    Pass {
        name: "loop_nest",
        summary: "loop nests from inlining positions",
        run: Run::Kernel(loop_nest::run),
        applies: always,
        in_place: false,
    },
    Pass {
        name: "persistent",
        summary: "a persistent grid's loop over its tiles, in a grouped raster",
        run: Run::Kernel(persistent::run),
        applies: persistent::used,
        in_place: false,
    },
    Pass {
        name: "tma",
        summary: "TMA boxes, tensor maps and mbarriers (checks the TMA rules)",
        run: Run::Plans(tma::run_plan),
        applies: tma::used,
        in_place: false,
    },
    Pass {
        name: "reduction",
        summary: "accumulators, block reductions, reduction writes",
        run: Run::Kernel(reduction::run),
        applies: always,
        in_place: false,
    },
    Pass {
        name: "online_softmax",
        summary: "running maximum and sum, rescale of the accumulator, division after the loop",
        run: Run::Kernel(online_softmax::run),
        applies: online_softmax::used,
        in_place: false,
    },
    Pass {
        name: "allocation",
        summary: "register and shared-memory allocations",
        run: Run::Completes(allocation::run),
        applies: always,
        in_place: false,
    },
    Pass {
        name: "indexing",
        summary: "index expressions for every access",
        run: Run::Kernel(indexing::run),
        applies: always,
        in_place: false,
    },
    Pass {
        name: "tma_issue",
        summary: "one TMA or bulk copy per box",
        run: Run::Reads(tma::run_issue),
        applies: tma::used,
        in_place: false,
    },
    Pass {
        name: "predicate",
        summary: "bounds and thread predicates, vector tails",
        run: Run::Kernel(predicate::run),
        applies: always,
        in_place: false,
    },
    Pass {
        name: "circular_buffer",
        summary: "mbarrier pipelines: prologue, main, epilogue; init and inval",
        run: Run::Reads(tma::run_circular),
        applies: tma::used,
        in_place: false,
    },
    Pass {
        name: "sync",
        summary: "block barriers for shared memory (RAW and WAR)",
        run: Run::Reads(sync::run),
        applies: always,
        in_place: false,
    },
    Pass {
        name: "mma",
        summary: "tensor-core tiles: wgmma on descriptors, accumulator fragments",
        run: Run::Reads(mma::run),
        applies: mma::used,
        in_place: false,
    },
    Pass {
        name: "specialize",
        summary: "size symbols replaced by the values the kernel is specialised to",
        run: Run::Kernel(specialize::run),
        applies: specialize::used,
        in_place: true,
    },
    Pass {
        name: "simplify",
        summary: "index arithmetic simplification",
        run: Run::Kernel(simplify::run),
        applies: always,
        in_place: false,
    },
    Pass {
        name: "tile_values",
        summary: "a persistent kernel's tile indices computed once per tile",
        run: Run::Kernel(tile_values::run),
        applies: tile_values::used,
        in_place: false,
    },
];

/// A loop key: its place in [`Keys::nodes`] (and its other tables).
pub use crate::kir::LoopKey;

/// Structural identity of a loop: axes of different tensors derived the same way from the same
/// axis classes get the same key, and so can share one loop.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KeyNode {
    Root(IterId),
    Split {
        parent: LoopKey,
        factor: i64,
        inner_split: bool,
        is_outer: bool,
    },
    Merge {
        outer: LoopKey,
        inner: LoopKey,
    },
    /// A persistent kernel's loop over the tiles a CTA takes (pass `persistent`); no tensor
    /// axis has it. The extent is the number of tiles (an upper bound on any CTA's count).
    Tiles(SizeExpr),
}

/// The value of a loop's variable in an index walk: its variable, except where the kernel binds
/// the index otherwise (a persistent kernel's tile indices, a stream-K piece's k index: in `env`
/// from [`Ctx::hw_env`], whose keys no walk has entered yet when it reaches their loop).
pub fn loop_value<S: std::hash::BuildHasher>(
    env: &HashMap<LoopKey, crate::kir::Val, S>,
    l: &crate::kir::Loop,
) -> crate::kir::Val {
    match env.get(&l.key) {
        Some(v) => v.clone(),
        None => crate::kir::Val::Var(l.var.clone()),
    }
}

/// The values of the loop indices in scope of an index walk, by key.
pub type LoopEnv<S> = HashMap<LoopKey, crate::kir::Val, S>;

/// Walks each body of `s` with `walk`, a loop's key bound in `env` to its variable's value
/// ([`loop_value`]) inside its body and restored after.
pub fn in_bodies<S, E, W>(
    s: &mut crate::kir::Stmt,
    env: &mut LoopEnv<S>,
    mut walk: W,
) -> Result<(), E>
where
    S: std::hash::BuildHasher,
    W: FnMut(&mut Vec<crate::kir::Stmt>, &mut LoopEnv<S>) -> Result<(), E>,
{
    let scope = match s {
        crate::kir::Stmt::Loop(l) => Some((l.key, env.insert(l.key, loop_value(env, l)))),
        _ => None,
    };
    let mut done = Ok(());
    for child in s.children_mut() {
        done = walk(child, env);
        if done.is_err() {
            break;
        }
    }
    match scope {
        Some((key, Some(p))) => env.insert(key, p),
        Some((key, None)) => env.remove(&key),
        None => None,
    };
    done
}

#[derive(Default)]
pub struct Keys {
    pub nodes: IdVec<LoopKey, KeyNode>,
    map: FxHashMap<KeyNode, LoopKey>,
    pub names: IdVec<LoopKey, String>,
    /// Per key, computed once when it is made (a key never changes, and these are asked for
    /// every statement of several passes): its extent, the axis classes it derives from, and
    /// whether its splits all divide evenly.
    extents: IdVec<LoopKey, SizeExpr>,
    classes: IdVec<LoopKey, Vec<IterId>>,
    divisible: IdVec<LoopKey, bool>,
}

/// The loop key of each axis given one so far, by axis id: a dense table (keys are asked for
/// for every axis of every statement of several passes).
#[derive(Default)]
pub struct IdKeys(Vec<Option<LoopKey>>);

impl IdKeys {
    pub fn get(&self, id: &IterId) -> Option<&LoopKey> {
        self.0.get(id.index())?.as_ref()
    }

    fn insert(&mut self, id: IterId, key: LoopKey) {
        if self.0.len() <= id.index() {
            self.0.resize(id.index() + 1, None);
        }
        self.0[id.index()] = Some(key);
    }
}

impl std::ops::Index<&IterId> for IdKeys {
    type Output = LoopKey;

    fn index(&self, id: &IterId) -> &LoopKey {
        self.get(id)
            .expect("an axis of a placed tensor has a loop key")
    }
}

/// State shared by the passes. Its maps keyed by ids (small integers the compiler hands out)
/// hash with `FxHash`: they are read for every statement of every pass, and SipHash's
/// flooding resistance buys nothing for keys no user chooses.
pub struct Ctx<'a> {
    pub fusion: &'a Fusion,
    pub keys: Keys,
    pub id_keys: IdKeys,
    /// The tensor each reduction accumulator buffer accumulates (set by `reduction`), so
    /// errors about the accumulator point at the reduction.
    pub accumulator_of: FxHashMap<BufferId, TensorId>,
    /// The exprs the kernel computes that read each tensor ([`Fusion::kernel_reads`], computed
    /// once): a view reads what it recomputes a tensor from, not the tensor.
    pub uses: IdVec<TensorId, Vec<crate::fusion::ExprId>>,
    /// The tensors the kernel does not compute on their own: only views read them, and
    /// recompute them ([`Fusion::recomputed_only_in_views`]).
    pub recomputed: IdVec<TensorId, bool>,
    /// Buffer of each tensor (inputs and outputs included).
    pub tensor_buffer: FxHashMap<TensorId, BufferId>,
    /// Axes (of the tensor's loop domain) each local or shared buffer spans.
    pub alloc_ids: FxHashMap<BufferId, Vec<IterId>>,
    /// Placement: loop keys enclosing each tensor's computation, and how many are shared with
    /// its consumers.
    pub placement: FxHashMap<TensorId, (Vec<LoopKey>, usize)>,
    /// The loop over `T` tiles of each online softmax ([`Fusion::online_softmax`], same order),
    /// set by `loop_nest` ([`online_softmax::tile_loops`]).
    pub online_tiles: Vec<LoopKey>,
    /// Names loop variables must avoid (size symbols, tensors).
    /// Every identifier the kernel already uses or may not use (user names, C++ and CUDA names,
    /// loop variables and derived buffer names handed out so far): [`Ctx::fresh_name`] steps
    /// around them.
    pub taken_names: foldhash::HashSet<String>,
    /// The next numeric suffix to try per base name.
    name_suffix: foldhash::HashMap<String, usize>,
    /// Conditions on the sizes checked by the runner before launch.
    pub constraints: Vec<crate::plan::Constraint>,
    /// See [`crate::CompileOptions::assume_aligned_vectors`].
    pub assume_aligned_vectors: bool,
    /// See [`crate::CompileOptions::aligned_for`].
    pub aligned_for: Option<std::collections::BTreeMap<String, i64>>,
    /// The sizes the kernel is specialised to ([`crate::CompileOptions::specialize`]): class
    /// extents ([`Ctx::class_extent`]), and so loop extents, divisibility, grid and block, are
    /// their values from the first pass; pass `specialize` replaces the size symbols left in
    /// the kernel IR (strides, a view's bounds).
    pub specialized: Option<std::collections::BTreeMap<String, i64>>,
    /// Set by a pass that left the kernel exactly as it found it (the pipeline then reuses the
    /// previous dump instead of printing the same text again); cleared before every pass.
    /// Passes that do not set it are dumped as usual.
    pub kernel_unchanged: bool,
}

impl<'a> Ctx<'a> {
    /// Whether a vector access whose alignment needs `divisible` (value, divisor) pairs takes
    /// the aligned path: always with `assume_aligned_vectors`, else when the sizes it is
    /// specialised for meet every pair.
    pub fn vectors_aligned(&self, divisible: &[(SizeExpr, i64)]) -> bool {
        self.assume_aligned_vectors
            || self.aligned_for.as_ref().is_some_and(|sizes| {
                divisible
                    .iter()
                    .all(|(value, divisor)| value.eval(sizes).is_ok_and(|v| v % divisor == 0))
            })
    }

    pub fn new(fusion: &'a Fusion) -> Ctx<'a> {
        // Names include the user's: a seeded fast hash (foldhash), not FxHash.
        let mut reserved: foldhash::HashSet<String> = fusion.symbols.iter().cloned().collect();
        reserved.extend(fusion.tensors.iter().map(|t| t.name.clone()));
        reserved.extend(crate::cuda::fixed_reserved().map(String::from));
        let recomputed = fusion.recomputed_only_in_views();
        let mut uses: IdVec<TensorId, Vec<crate::fusion::ExprId>> =
            vec![Vec::new(); fusion.tensors.len()].into();
        for e in fusion.expr_ids() {
            if recomputed[fusion.exprs[e].output] {
                continue;
            }
            for t in fusion.kernel_reads(e) {
                uses[t].push(e);
            }
        }
        Ctx {
            fusion,
            keys: Keys::default(),
            id_keys: IdKeys::default(),
            uses,
            recomputed,
            accumulator_of: FxHashMap::default(),
            tensor_buffer: FxHashMap::default(),
            alloc_ids: FxHashMap::default(),
            placement: FxHashMap::default(),
            online_tiles: Vec::new(),
            taken_names: reserved,
            name_suffix: Default::default(),
            constraints: Vec::new(),
            assume_aligned_vectors: false,
            aligned_for: None,
            specialized: None,
            kernel_unchanged: false,
        }
    }

    /// The position in `t`'s loop domain of its first axis inside the loops it shares with its
    /// consumers: its placement's loops after the shared ones are its own axes (a persistent
    /// kernel's tile loop, which no axis has, does not count).
    pub fn own_axes_from(&self, t: TensorId) -> usize {
        let (keys, q) = &self.placement[&t];
        let own = keys[(*q).min(keys.len())..]
            .iter()
            .filter(|&&k| !matches!(self.keys.nodes[k], KeyNode::Tiles(_)))
            .count();
        self.fusion.tensors[t].loop_domain.len().saturating_sub(own)
    }

    /// A new register buffer of `k` that no tensor has (an accumulator, a running statistic),
    /// named `name` or a fresh variant of it, spanning the axes `ids` (its `alloc` is the
    /// caller's to place).
    pub fn new_register(
        &mut self,
        k: &mut Kernel,
        name: &str,
        dtype: crate::dtype::DType,
        ids: Vec<IterId>,
    ) -> BufferId {
        let b = BufferId::new(k.buffers.len());
        k.buffers.push(crate::kir::Buffer {
            name: self.fresh_name(name),
            dtype,
            memory: crate::fusion::MemoryType::Local,
            tensor: None,
            size: None,
            smem_offset: None,
            global_shape: Vec::new(),
            is_input: false,
        });
        self.alloc_ids.insert(b, ids);
        b
    }

    /// The key of a loop no tensor axis has (a persistent kernel's tile loop).
    pub fn loop_only_key(&mut self, node: KeyNode) -> LoopKey {
        if let Some(&k) = self.keys.map.get(&node) {
            return k;
        }
        let name = self.key_name(&node);
        let (extent, classes, divisible) = self.derive_key(&node);
        let k = self.keys.nodes.push(node.clone());
        self.keys.map.insert(node, k);
        self.keys.names.push(name);
        self.keys.extents.push(extent);
        self.keys.classes.push(classes);
        self.keys.divisible.push(divisible);
        k
    }

    /// The loop key of an axis.
    pub fn key(&mut self, id: IterId) -> LoopKey {
        if let Some(&k) = self.id_keys.get(&id) {
            return k;
        }
        let f = self.fusion;
        if let Some(target) = f.ids[id].alias {
            let k = self.key(target);
            self.id_keys.insert(id, k);
            return k;
        }
        let node = match f.ids[id].origin {
            IterOrigin::Root => KeyNode::Root(f.class_of(id)),
            IterOrigin::Split {
                parent,
                factor,
                inner_split,
                is_outer,
            } => KeyNode::Split {
                parent: self.key(parent),
                factor,
                inner_split,
                is_outer,
            },
            IterOrigin::Merge { outer, inner } => KeyNode::Merge {
                outer: self.key(outer),
                inner: self.key(inner),
            },
        };
        let k = self.loop_only_key(node);
        self.id_keys.insert(id, k);
        k
    }

    fn key_name(&mut self, node: &KeyNode) -> String {
        let base = match node {
            // Named after the size as written, also in a kernel specialised to its value.
            KeyNode::Root(class) => match self.class_extent_as_written(*class) {
                SizeExpr::Sym(s) => s.to_ascii_lowercase(),
                _ => "d".to_string(),
            },
            KeyNode::Split {
                parent, is_outer, ..
            } => {
                let p = &self.keys.names[*parent];
                let sep = if p.contains('_') { "" } else { "_" };
                format!("{p}{sep}{}", if *is_outer { "o" } else { "i" })
            }
            KeyNode::Merge { outer, inner } => {
                let strip = |s: &str| s.trim_end_matches(|c: char| c.is_ascii_digit()).to_string();
                format!(
                    "{}{}",
                    strip(&self.keys.names[*outer]),
                    strip(&self.keys.names[*inner])
                )
            }
            KeyNode::Tiles(_) => "tile".to_string(),
        };
        self.fresh_name(&base)
    }

    /// `base`, or `base2`, `base3`, ... : the first that no name of the kernel takes yet; it is
    /// taken from then on.
    pub fn fresh_name(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        // Resume the suffix search where the last one for this base stopped: many loops over
        // one size symbol must not make naming quadratic.
        let n = self.name_suffix.entry(base.to_string()).or_insert(2);
        while self.taken_names.contains(&name) {
            name = format!("{base}{n}");
            *n += 1;
        }
        self.taken_names.insert(name.clone());
        name
    }

    /// Loop keys bound to hardware indices anywhere in the kernel (their variables are declared
    /// once at the top), as the starting index environment of a walk over the kernel.
    pub fn hw_env<S: std::hash::BuildHasher + Default>(
        &self,
        k: &Kernel,
    ) -> HashMap<LoopKey, crate::kir::Val, S> {
        let persistent = k.persistent.iter().flat_map(|p| &p.bindings);
        // A stream-K piece's k loop counts from its first step `lo`.
        let piece = crate::kir::stream_k(k).and_then(|sk| {
            let index = crate::kir::Val::add(crate::kir::Val::Var(sk.k_var.clone()), sk.lo.clone());
            Some((self.key_named(&sk.k_var)?, index))
        });
        k.hw_vars
            .iter()
            .filter_map(|(var, _)| Some((self.key_named(var)?, crate::kir::Val::Var(var.clone()))))
            .chain(
                persistent
                    .filter_map(|(var, _, value)| Some((self.key_named(var)?, value.clone()))),
            )
            .chain(piece)
            .collect()
    }

    /// The key of the loops whose variable is `var` (loop variables are their keys' names).
    pub fn key_named(&self, var: &str) -> Option<LoopKey> {
        Some(LoopKey::new(self.keys.names.iter().position(|n| n == var)?))
    }

    /// Extent of an axis class (given by its root; 1 for any other axis), a constant in a
    /// kernel specialised to its sizes ([`Ctx::specialized`]).
    pub fn class_extent(&self, class: IterId) -> SizeExpr {
        let extent = self.class_extent_as_written(class);
        match &self.specialized {
            Some(sizes) => extent.specialized(sizes),
            None => extent,
        }
    }

    /// [`Ctx::class_extent`] over the size symbols as the program writes them. The fusion
    /// keeps each class's extent at hand, so this is a lookup.
    fn class_extent_as_written(&self, class: IterId) -> SizeExpr {
        if self.fusion.class_of(class) == class {
            self.fusion.class_extent(class)
        } else {
            SizeExpr::Const(1)
        }
    }

    /// The extent, axis classes and divisibility of a new key, from those of the keys it is
    /// derived from (made before it).
    fn derive_key(&self, node: &KeyNode) -> (SizeExpr, Vec<IterId>, bool) {
        let keys = &self.keys;
        match node {
            KeyNode::Root(class) => (self.class_extent(*class), vec![*class], true),
            KeyNode::Split {
                parent,
                factor,
                inner_split,
                is_outer,
            } => {
                let p = *parent;
                let extent =
                    split_extent(keys.extents[p].clone(), *factor, *inner_split, *is_outer);
                let divisible = keys.divisible[p]
                    && keys.extents[p].as_const().is_some_and(|e| e % factor == 0);
                (extent, keys.classes[p].clone(), divisible)
            }
            KeyNode::Merge { outer, inner } => {
                let (o, i) = (*outer, *inner);
                let extent = mul(keys.extents[o].clone(), keys.extents[i].clone());
                let mut classes = keys.classes[o].clone();
                classes.extend_from_slice(&keys.classes[i]);
                (extent, classes, keys.divisible[o] && keys.divisible[i])
            }
            KeyNode::Tiles(tiles) => (tiles.clone(), Vec::new(), true),
        }
    }

    pub fn key_extent(&self, k: LoopKey) -> &SizeExpr {
        &self.keys.extents[k]
    }

    /// Axis classes a key is derived from.
    pub fn key_classes(&self, k: LoopKey) -> &[IterId] {
        &self.keys.classes[k]
    }

    /// Extent of an axis of some tensor (broadcast roots iterate their class's extent).
    pub fn id_extent(&mut self, id: IterId) -> SizeExpr {
        let k = self.key(id);
        self.key_extent(k).clone()
    }

    pub fn is_reduction(&self, id: IterId) -> bool {
        self.fusion.ids[id].kind == IterKind::Reduction
    }

    /// Whether a split of this axis may leave a ragged last tile.
    pub fn divisible(&self, k: LoopKey) -> bool {
        self.keys.divisible[k]
    }
}

pub use crate::plan::{ceil_div, mul, split_extent};
