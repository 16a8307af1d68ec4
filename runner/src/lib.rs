//! The hopfuse runner: compiles programs with the `hopfuse` compiler, builds the CUDA with NVRTC
//! for sm_90a, launches, validates and times the kernels (see `engine`).
//!
//! The modules depend on each other in one direction (`runner/tests/layering.rs` fails on an
//! import cycle). From the bottom: the wire types (`hopfuse-api`), the GPU and its tools
//! (`gpu`, `nvrtc`, `cublas`, `gemm_reference`, `tensor_map`, `occupancy`), `prepare` (no GPU:
//! the program compiled once for the sizes), `engine` (with `peers`, `clock`, `profile`), then
//! `worker`, `warm`, `queue`, `serve`, `distributed` and `main.rs` on top
//! (docs/ARCHITECTURE.md draws the layers and a run request's path).

pub mod api_error;
pub mod bench;
pub mod clock;
pub mod compile_slots;
pub mod cublas;
pub mod data;
pub mod distributed;
pub mod documents;
pub mod engine;
pub mod faults;
pub mod gemm_reference;
pub mod gpu;
pub mod host_parallel;
pub mod inspect;
pub mod job_spec;
pub mod listing;
pub mod not_run;
pub mod occupancy;
pub mod peers;
pub mod prepare;
pub mod profile;
pub mod queue;
pub mod rate_limit;
pub mod report;
pub mod run_checks;
pub mod scalars;
pub mod selftest;
pub mod serve;
pub mod serve_args;
pub mod sizes;
pub mod static_files;
pub mod store;
pub mod tune;
pub mod validate;
pub mod warm;
pub mod worker;

// NVRTC and TMA tensor-map encoding live in `hopfuse-launch` (shared with the Python package).
pub use hopfuse_launch::{nvrtc, tensor_map};
