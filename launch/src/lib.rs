//! hopfuse-launch: what it takes to run a hopfuse kernel on buffers someone else owns, shared
//! by the runner (`hopfuse run`, the service's workers) and the Python package (`python/`).
//!
//! - [`specialize`]: a program compiled for its sizes (index type, aligned vector accesses,
//!   the plan's constraints and TMA boxes checked), no GPU;
//! - [`nvrtc`]: CUDA C++ to an `sm_90a` CUBIN; [`cache`]: CUBINs by content, in memory and on
//!   disk;
//! - [`args`]: the kernel's arguments in the plan's parameter order, TMA tensor maps
//!   ([`tensor_map`]) encoded from the tensors' addresses;
//! - [`driver`]: loading a CUBIN into a device's primary context (PyTorch's) and launching on a
//!   caller's stream;
//! - [`index`]: the index type the sizes need;
//! - [`export`]: the files that launch a kernel, or a split fusion's kernels in order, without
//!   hopfuse (`hopfuse export`).
//!
//! cudarc loads libcuda and libnvrtc at run time: everything up to the launch works on a
//! machine without a GPU, and the calls that need one say so.

pub mod args;
pub mod cache;
pub mod driver;
pub mod export;
pub mod index;
pub mod nvrtc;
pub mod specialize;
pub mod tensor_map;
