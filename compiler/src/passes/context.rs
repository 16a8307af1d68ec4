//! The pass context: what the passes share besides the kernel, kept apart by kind as Cranelift
//! keeps its analyses apart from the IR.
//!
//! Takes the scheduled [`Fusion`] and the [`PassOptions`] (fixed at construction). [`Ctx`]
//! holds, each in a typed struct of its own:
//! - [`PassOptions`]: how the kernel is compiled (vector alignment, specialised sizes);
//! - [`Keys`]: the loop-key analysis, a hash-consed [`KeyNode`] per loop with its name, extent,
//!   classes and divisibility, computed once per key as the passes ask for them, and the key of
//!   each axis;
//! - [`Reads`]: which exprs read each tensor, computed once from the fusion;
//! - [`Layout`]: where each tensor is computed and stored (its placement, buffer and the axes a
//!   buffer spans), set by `loop_nest` and kept in step with the kernel by the passes that
//!   move or add buffers; [`Ctx::row_padding`] gives a padded shared buffer's rows (sized by
//!   `allocation`, strided by `indexing`: here so that neither imports the other);
//! - [`Names`]: every identifier the kernel takes, and fresh names that step around them.
//!
//! What one pass hands to a later one is not here: it is the pass's typed result, wired in
//! [`super::PIPELINE`] (see [`super::Handoff`]). Guarantees: a key never changes once made,
//! and a name [`Names::fresh`] hands out is never handed out again.

use crate::fusion::{ExprId, Fusion, IterId, IterKind, IterOrigin, MemoryType, TensorId};
use crate::id::IdVec;
use crate::kir::{BufferId, Kernel, Loop, Stmt, Val};
use crate::plan::SizeExpr;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, HashMap};

pub use crate::plan::{add, ceil_div, mul, split_extent};

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
pub fn loop_value<S: std::hash::BuildHasher>(env: &HashMap<LoopKey, Val, S>, l: &Loop) -> Val {
    match env.get(&l.key) {
        Some(v) => v.clone(),
        None => Val::Var(l.var.clone()),
    }
}

/// The values of the loop indices in scope of an index walk, by key.
pub type LoopEnv<S> = HashMap<LoopKey, Val, S>;

/// The loop keys an index walk (a [`crate::kir::VisitorMut`]) has bound: entering a loop's
/// body binds its key in the walk's env to its variable's value ([`loop_value`]); leaving it
/// restores the binding that hid.
#[derive(Default)]
pub struct LoopScope {
    /// Each bound key and what it hid, innermost last.
    hidden: Vec<(LoopKey, Option<Val>)>,
}

impl LoopScope {
    /// Binds `l`'s key in `env` until [`LoopScope::unbind`].
    pub fn bind<S: std::hash::BuildHasher>(&mut self, env: &mut LoopEnv<S>, l: &Loop) {
        let value = loop_value(env, l);
        self.hidden.push((l.key, env.insert(l.key, value)));
    }

    /// Undoes the last [`LoopScope::bind`].
    pub fn unbind<S: std::hash::BuildHasher>(&mut self, env: &mut LoopEnv<S>) {
        match self.hidden.pop().expect("a key bound") {
            (key, Some(p)) => env.insert(key, p),
            (key, None) => env.remove(&key),
        };
    }

    /// On entering a body of `st` (its `VisitorMut::enter`): binds a loop's key.
    pub fn enter<S: std::hash::BuildHasher>(&mut self, env: &mut LoopEnv<S>, st: &Stmt) {
        if let Stmt::Loop(l) = st {
            self.bind(env, l);
        }
    }

    /// On leaving a body of `st` (its `VisitorMut::leave`): unbinds a loop's key.
    pub fn leave<S: std::hash::BuildHasher>(&mut self, env: &mut LoopEnv<S>, st: &Stmt) {
        if let Stmt::Loop(_) = st {
            self.unbind(env);
        }
    }
}

/// The loop-key analysis: a key per distinct loop, made the first time an axis (or a loop no
/// axis has) asks for it, with what every pass asks of a key computed once when it is made.
#[derive(Default)]
pub struct Keys {
    pub nodes: IdVec<LoopKey, KeyNode>,
    map: FxHashMap<KeyNode, LoopKey>,
    /// Each key's name, which is the variable of its loops (names are fresh, so one per key).
    pub names: IdVec<LoopKey, String>,
    /// The key of each name in [`Keys::names`] (a walk finds a loop's key from its variable).
    by_name: foldhash::HashMap<String, LoopKey>,
    /// The key of each axis given one so far.
    pub of_axis: AxisKeys,
    /// Per key, computed once when it is made (a key never changes, and these are asked for
    /// every statement of several passes): its extent, the axis classes it derives from, and
    /// whether its splits all divide evenly.
    extents: IdVec<LoopKey, SizeExpr>,
    classes: IdVec<LoopKey, Vec<IterId>>,
    divisible: IdVec<LoopKey, bool>,
}

impl Keys {
    /// The key of the loops whose variable is `var` (loop variables are their keys' names).
    pub fn named(&self, var: &str) -> Option<LoopKey> {
        self.by_name.get(var).copied()
    }

    pub fn extent(&self, k: LoopKey) -> &SizeExpr {
        &self.extents[k]
    }

    /// Axis classes a key is derived from.
    pub fn classes(&self, k: LoopKey) -> &[IterId] {
        &self.classes[k]
    }

    /// Whether a split of this axis may leave a ragged last tile.
    pub fn divisible(&self, k: LoopKey) -> bool {
        self.divisible[k]
    }
}

/// The loop key of each axis given one so far, by axis id: a dense table (keys are asked for
/// for every axis of every statement of several passes).
#[derive(Default)]
pub struct AxisKeys(Vec<Option<LoopKey>>);

impl AxisKeys {
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

impl std::ops::Index<&IterId> for AxisKeys {
    type Output = LoopKey;

    fn index(&self, id: &IterId) -> &LoopKey {
        self.get(id)
            .expect("an axis of a placed tensor has a loop key")
    }
}

/// How the kernel is compiled, from [`crate::CompileOptions`]; fixed for the whole lowering.
#[derive(Clone, Debug, Default)]
pub struct PassOptions {
    /// See [`crate::CompileOptions::assume_aligned_vectors`].
    pub assume_aligned_vectors: bool,
    /// See [`crate::CompileOptions::aligned_for`].
    pub aligned_for: Option<BTreeMap<String, i64>>,
    /// The sizes the kernel is specialised to ([`crate::CompileOptions::specialize`]): class
    /// extents ([`Ctx::class_extent`]), and so loop extents, divisibility, grid and block, are
    /// their values from the first pass; pass `specialize` replaces the size symbols left in
    /// the kernel IR (strides, a view's bounds).
    pub specialized: Option<BTreeMap<String, i64>>,
}

impl PassOptions {
    /// The pass options of a compilation.
    pub fn of(options: &crate::CompileOptions) -> PassOptions {
        PassOptions {
            assume_aligned_vectors: options.assume_aligned_vectors,
            aligned_for: options.aligned_for.clone(),
            specialized: options
                .specialize
                .then(|| options.aligned_for.clone())
                .flatten(),
        }
    }

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
}

/// Which exprs read each tensor, computed once from the fusion when the context is made.
pub struct Reads {
    /// The exprs the kernel computes that read each tensor ([`Fusion::kernel_reads`]): a view
    /// reads what it recomputes a tensor from, not the tensor.
    pub uses: IdVec<TensorId, Vec<ExprId>>,
    /// The tensors the kernel does not compute on their own: only views read them, and
    /// recompute them ([`Fusion::recomputed_only_in_views`]).
    pub recomputed: IdVec<TensorId, bool>,
}

impl Reads {
    fn of(fusion: &Fusion) -> Reads {
        let recomputed = fusion.recomputed_only_in_views();
        let mut uses: IdVec<TensorId, Vec<ExprId>> = vec![Vec::new(); fusion.tensors.len()].into();
        for e in fusion.expr_ids() {
            if recomputed[fusion.exprs[e].output] {
                continue;
            }
            for t in fusion.kernel_reads(e) {
                uses[t].push(e);
            }
        }
        Reads { uses, recomputed }
    }
}

/// Where each tensor is computed and stored: set by `loop_nest`, and kept in step with the
/// kernel by the passes that change it (`persistent` adds its tile loop to placements,
/// `reduction` and `online_softmax` add register buffers, `online_softmax` drops the buffers
/// of tensors it no longer stores, `allocation` records the axes each buffer spans).
#[derive(Default)]
pub struct Layout {
    /// Placement: loop keys enclosing each tensor's computation, and how many are shared with
    /// its consumers.
    pub placement: FxHashMap<TensorId, (Vec<LoopKey>, usize)>,
    /// Buffer of each tensor (inputs and outputs included).
    pub tensor_buffer: FxHashMap<TensorId, BufferId>,
    /// Axes (of the tensor's loop domain) each local or shared buffer spans.
    pub alloc_ids: FxHashMap<BufferId, Vec<IterId>>,
}

/// The rows of a padded shared buffer (`row_pad=`): its last `row_axes` allocated axes come
/// from its tensor's contiguous (last) axis alone and make one row (the innermost axis when
/// none does); rows lie `stride` = row elements + pad apart. `allocation` sizes the buffer by
/// it and `indexing` strides by it.
pub struct RowPad {
    pub row_axes: usize,
    pub stride: SizeExpr,
}

/// Every identifier the kernel already uses or may not use (user names, C++ and CUDA names,
/// loop variables and derived buffer names handed out so far); [`Names::fresh`] steps around
/// them. Names include the user's: a seeded fast hash (foldhash), not FxHash.
pub struct Names {
    taken: foldhash::HashSet<String>,
    /// The next numeric suffix to try per base name.
    suffix: foldhash::HashMap<String, usize>,
}

impl Names {
    /// The names a fusion's kernel may not take: its size symbols, its tensors' names and the
    /// names C++ and CUDA reserve.
    fn reserved_by(fusion: &Fusion) -> Names {
        let mut taken: foldhash::HashSet<String> = fusion.symbols.iter().cloned().collect();
        taken.extend(fusion.tensors.iter().map(|t| t.name.clone()));
        taken.extend(crate::cuda::fixed_reserved().map(String::from));
        Names {
            taken,
            suffix: Default::default(),
        }
    }

    /// `base`, or `base2`, `base3`, ... : the first that no name of the kernel takes yet; it is
    /// taken from then on.
    pub fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        // Resume the suffix search where the last one for this base stopped: many loops over
        // one size symbol must not make naming quadratic.
        let n = self.suffix.entry(base.to_string()).or_insert(2);
        while self.taken.contains(&name) {
            name = format!("{base}{n}");
            *n += 1;
        }
        self.taken.insert(name.clone());
        name
    }
}

/// What the passes share besides the kernel (not what they hand each other: see the module
/// documentation). Its maps keyed by ids (small integers the compiler hands out) hash with
/// `FxHash`: they are read for every statement of every pass, and SipHash's flooding
/// resistance buys nothing for keys no user chooses.
pub struct Ctx<'a> {
    pub fusion: &'a Fusion,
    pub options: PassOptions,
    pub keys: Keys,
    pub reads: Reads,
    pub layout: Layout,
    pub names: Names,
}

impl<'a> Ctx<'a> {
    pub fn new(fusion: &'a Fusion, options: PassOptions) -> Ctx<'a> {
        Ctx {
            fusion,
            options,
            keys: Keys::default(),
            reads: Reads::of(fusion),
            layout: Layout::default(),
            names: Names::reserved_by(fusion),
        }
    }

    /// [`Names::fresh`].
    pub fn fresh_name(&mut self, base: &str) -> String {
        self.names.fresh(base)
    }

    /// The position in `t`'s loop domain of its first axis inside the loops it shares with its
    /// consumers: its placement's loops after the shared ones are its own axes (a persistent
    /// kernel's tile loop, which no axis has, does not count).
    pub fn own_axes_from(&self, t: TensorId) -> usize {
        let (keys, q) = &self.layout.placement[&t];
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
            memory: MemoryType::Local,
            tensor: None,
            size: None,
            smem_offset: None,
            global_shape: Vec::new(),
            is_input: false,
            l2: crate::fusion::L2Policy::Normal,
        });
        self.layout.alloc_ids.insert(b, ids);
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
        self.keys.by_name.insert(name.clone(), k);
        self.keys.names.push(name);
        self.keys.extents.push(extent);
        self.keys.classes.push(classes);
        self.keys.divisible.push(divisible);
        k
    }

    /// The loop key of an axis.
    pub fn key(&mut self, id: IterId) -> LoopKey {
        if let Some(&k) = self.keys.of_axis.get(&id) {
            return k;
        }
        let f = self.fusion;
        if let Some(target) = f.ids[id].alias {
            let k = self.key(target);
            self.keys.of_axis.insert(id, k);
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
        self.keys.of_axis.insert(id, k);
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

    /// Loop keys bound to hardware indices anywhere in the kernel (their variables are declared
    /// once at the top), as the starting index environment of a walk over the kernel.
    pub fn hw_env<S: std::hash::BuildHasher + Default>(&self, k: &Kernel) -> LoopEnv<S> {
        let persistent = k.persistent.iter().flat_map(|p| &p.bindings);
        // A stream-K piece's k loop counts from its first step `lo`.
        let piece = crate::kir::stream_k(k).and_then(|sk| {
            let index = Val::add(Val::Var(sk.k_var.clone()), sk.lo.clone());
            Some((self.keys.named(&sk.k_var)?, index))
        });
        // A document-masked key-tile loop counts the tiles it visits; its index is the tile.
        let visited = k
            .visited
            .as_ref()
            .and_then(|v| Some((self.keys.named(&v.var)?, v.tile(Val::Var(v.var.clone())))));
        k.hw_vars
            .iter()
            .filter_map(|(var, _)| Some((self.keys.named(var)?, Val::Var(var.clone()))))
            .chain(
                persistent
                    .filter_map(|(var, _, value)| Some((self.keys.named(var)?, value.clone()))),
            )
            .chain(piece)
            .chain(visited)
            .collect()
    }

    /// Extent of an axis class (given by its root; 1 for any other axis), a constant in a
    /// kernel specialised to its sizes ([`PassOptions::specialized`]).
    pub fn class_extent(&self, class: IterId) -> SizeExpr {
        let extent = self.class_extent_as_written(class);
        match &self.options.specialized {
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
        self.keys.extent(k)
    }

    /// Axis classes a key is derived from.
    pub fn key_classes(&self, k: LoopKey) -> &[IterId] {
        self.keys.classes(k)
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
        self.keys.divisible(k)
    }

    /// The row layout of the buffer of `tensor` in `memory` over the allocated axes `ids`,
    /// when it is a padded shared buffer ([`RowPad`]).
    pub fn row_padding(
        &mut self,
        tensor: Option<TensorId>,
        memory: MemoryType,
        ids: &[IterId],
    ) -> Option<RowPad> {
        let t = tensor.filter(|_| memory == MemoryType::Shared)?;
        let f = self.fusion;
        let pad = i64::from(f.tensors[t].row_pad);
        let &last = f.logical(t).last()?;
        if pad == 0 || ids.is_empty() {
            return None;
        }
        let contiguous = f.class_of(last);
        let row_axes = ids
            .iter()
            .rev()
            .take_while(|&&id| {
                let key = self.key(id);
                self.key_classes(key).iter().all(|&c| c == contiguous)
            })
            .count()
            .max(1);
        let row = ids[ids.len() - row_axes..]
            .iter()
            .fold(SizeExpr::Const(1), |acc, &id| mul(acc, self.id_extent(id)));
        Some(RowPad {
            row_axes,
            stride: add(row, SizeExpr::Const(pad)),
        })
    }
}

/// Whether a pass changed the kernel (the pipeline reuses the previous dump for one that did
/// not, instead of printing the same text again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Changed,
    Unchanged,
}

impl Change {
    /// [`Change::Changed`] when `changed`.
    pub fn from_changed(changed: bool) -> Change {
        if changed {
            Change::Changed
        } else {
            Change::Unchanged
        }
    }
}
