//! The hopfuse runner: compiles programs with the `hopfuse` compiler, builds the CUDA with NVRTC
//! for sm_90a, launches, validates and times the kernels (see `engine`).

pub mod bench;
pub mod cublas;
pub mod data;
pub mod engine;
pub mod faults;
pub mod gpu;
pub mod nvrtc;
pub mod peers;
pub mod queue;
pub mod report;
pub mod selftest;
pub mod serve;
pub mod sizes;
pub mod store;
pub mod tensor_map;
pub mod validate;
pub mod warm;
pub mod worker;
