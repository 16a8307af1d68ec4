//! Typed ids: the small integers the compiler hands out for tensors, axes and exprs (fusion IR),
//! buffers, mbarrier arrays and tensor maps (kernel IR), loop keys and pipes (passes), each a
//! type of its own, so that one cannot be passed where another is meant.
//!
//! `define_id!` makes an id type: a `Copy + Eq + Ord + Hash + Debug` newtype over `usize` with
//! `new` and `index` (also as the [`Id`] trait), printed by `Debug` and `Display` as the bare
//! number (as the `usize` it replaces, so messages and dumps read the same), and `Index`/`IndexMut` on the `Vec` and slice of what it names, so
//! `fusion.tensors[t]` and `kernel.buffers[b]` read as before but take only their own id.
//! [`IdVec`] is a vector indexed by one id type, for tables kept beside the owning one (the
//! loop keys' names, extents, classes; per-tensor tables of the reference evaluator and the
//! torch emitter). The ids serialize as their number (in the pipeline plan's JSON snapshots
//! only: the launch plan and the pipeline view carry names and positions of their own).
//! [`sort_by_position`] orders a list by an index key through one sort shared by its callers.
//!
//! A tensor id indexes the tensors:
//!
//! ```
//! use hopfuse::{fusion::Fusion, kir::Kernel};
//! fn name_of<'f>(f: &'f Fusion, k: &Kernel, b: hopfuse::kir::BufferId) -> Option<&'f str> {
//!     let t = k.buffers[b].tensor?;
//!     Some(&f.tensors[t].name)
//! }
//! ```
//!
//! and a buffer id does not:
//!
//! ```compile_fail,E0277
//! use hopfuse::{fusion::Fusion, kir::Kernel};
//! fn name_of<'f>(f: &'f Fusion, k: &Kernel, b: hopfuse::kir::BufferId) -> Option<&'f str> {
//!     let _t = k.buffers[b].tensor?;
//!     Some(&f.tensors[b].name)
//! }
//! ```

use std::marker::PhantomData;

/// What every id type is: a position in its vector.
pub trait Id: Copy {
    fn new(index: usize) -> Self;
    fn index(self) -> usize;
}

/// `define_id!(/// doc, pub Name => Owner, ...)` defines id type `Name` (see the module
/// documentation); each `Owner` gets `Index<Name>` and `IndexMut<Name>` on its `Vec` and slice.
/// An owner is the type the id names, never a plain table type (a `Vec<bool>` indexed by
/// tensor ids is an `IdVec<TensorId, bool>`), so an id of one kind cannot index another's
/// vector.
macro_rules! define_id {
    ($(#[$meta:meta])* $vis:vis $name:ident => $($owner:ty),*) => {
        $(#[$meta])*
        // (Serialize: as the bare number, in the pipeline plan's JSON snapshots.)
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
        $vis struct $name(usize);

        impl $name {
            /// The id of element `index` of its vector.
            pub const fn new(index: usize) -> Self {
                $name(index)
            }

            /// Its position in its vector.
            pub const fn index(self) -> usize {
                self.0
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(&self.0, f)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Display::fmt(&self.0, f)
            }
        }

        impl $crate::id::Id for $name {
            fn new(index: usize) -> Self {
                $name(index)
            }

            fn index(self) -> usize {
                self.0
            }
        }

        $(
            impl std::ops::Index<$name> for [$owner] {
                type Output = $owner;
                fn index(&self, id: $name) -> &$owner {
                    &self[id.0]
                }
            }

            impl std::ops::IndexMut<$name> for [$owner] {
                fn index_mut(&mut self, id: $name) -> &mut $owner {
                    &mut self[id.0]
                }
            }

            impl std::ops::Index<$name> for Vec<$owner> {
                type Output = $owner;
                fn index(&self, id: $name) -> &$owner {
                    &self[id.0]
                }
            }

            impl std::ops::IndexMut<$name> for Vec<$owner> {
                fn index_mut(&mut self, id: $name) -> &mut $owner {
                    &mut self[id.0]
                }
            }
        )*
    };
}
pub(crate) use define_id;

/// A vector whose elements are named by id type `I` (indexing takes an `I`, [`IdVec::push`]
/// returns one). It derefs to its slice for iteration.
#[derive(Clone, PartialEq, Eq)]
pub struct IdVec<I, T> {
    items: Vec<T>,
    id: PhantomData<fn(I) -> I>,
}

/// Printed as the list it holds.
impl<I, T: std::fmt::Debug> std::fmt::Debug for IdVec<I, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.items.fmt(f)
    }
}

impl<I, T> Default for IdVec<I, T> {
    fn default() -> Self {
        IdVec {
            items: Vec::new(),
            id: PhantomData,
        }
    }
}

impl<I: Id, T> IdVec<I, T> {
    /// Appends `item` and returns its id.
    pub fn push(&mut self, item: T) -> I {
        self.items.push(item);
        I::new(self.items.len() - 1)
    }

    /// The id the next [`IdVec::push`] returns.
    pub fn next_id(&self) -> I {
        I::new(self.items.len())
    }
}

impl<I, T> From<Vec<T>> for IdVec<I, T> {
    /// Element `i` gets id `i`.
    fn from(items: Vec<T>) -> Self {
        IdVec {
            items,
            id: PhantomData,
        }
    }
}

impl<I, T> FromIterator<T> for IdVec<I, T> {
    fn from_iter<It: IntoIterator<Item = T>>(items: It) -> Self {
        Vec::from_iter(items).into()
    }
}

impl<I, T> std::ops::Deref for IdVec<I, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.items
    }
}

impl<I: Id, T> std::ops::Index<I> for IdVec<I, T> {
    type Output = T;
    fn index(&self, id: I) -> &T {
        &self.items[id.index()]
    }
}

impl<I: Id, T> std::ops::IndexMut<I> for IdVec<I, T> {
    fn index_mut(&mut self, id: I) -> &mut T {
        &mut self.items[id.index()]
    }
}

/// Sorts `items` by `key` (a position or an id's index), stably. Every `sort` of another element
/// or key type is another copy of the standard library's sort in the playground's wasm (about
/// 4.5 KB each), so the compiler's small orderings go through this one: a sort of
/// `(key, index)` pairs, the same for every caller, then the items moved into that order.
pub fn sort_by_position<T>(items: &mut Vec<T>, key: impl Fn(&T) -> usize) {
    let mut order: Vec<(usize, usize)> = (items.iter().enumerate())
        .map(|(i, x)| (key(x), i))
        .collect();
    order.sort_unstable(); // (the index breaks ties: stable)
    let mut old: Vec<Option<T>> = std::mem::take(items).into_iter().map(Some).collect();
    items.extend((order.into_iter()).map(|(_, i)| old[i].take().expect("each index comes once")));
}

#[cfg(test)]
mod sort_tests {
    #[test]
    fn sort_by_position_is_a_stable_sort_by_the_key() {
        let mut v = vec![(3, 'a'), (1, 'b'), (3, 'c'), (0, 'd'), (1, 'e')];
        let mut expected = v.clone();
        expected.sort_by_key(|&(k, _)| k);
        super::sort_by_position(&mut v, |&(k, _)| k);
        assert_eq!(v, expected);
        let mut empty: Vec<u8> = Vec::new();
        super::sort_by_position(&mut empty, |&x| x as usize);
        assert!(empty.is_empty());
    }
}
