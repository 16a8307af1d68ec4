//! The index type a kernel needs for its sizes (the compiler's one rule, `hopfuse::index_type`,
//! which the playground applies too): 32-bit when every tensor has fewer than 2^31 elements and
//! every size fits an `int`, else 64-bit.

pub use hopfuse::index_type::{choose_index_type, tensor_elements};
