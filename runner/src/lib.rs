//! The hopfuse runner: compiles programs with the `hopfuse` compiler, builds the CUDA with NVRTC
//! for sm_90a, launches, validates and times the kernels (see `engine`).

pub mod api_error;
pub mod bench;
pub mod clock;
pub mod compile_slots;
pub mod cublas;
pub mod data;
pub mod distributed;
pub mod engine;
pub mod faults;
pub mod gemm_reference;
pub mod gpu;
pub mod host_parallel;
pub mod inspect;
pub mod job_spec;
pub mod listing;
pub mod not_run;
pub mod nvrtc;
pub mod occupancy;
pub mod peers;
pub mod prepare;
pub mod profile;
pub mod queue;
pub mod rate_limit;
pub mod report;
pub mod run_checks;
pub mod selftest;
pub mod serve;
pub mod serve_args;
pub mod sizes;
pub mod static_files;
pub mod store;
pub mod tensor_map;
pub mod validate;
pub mod warm;
pub mod worker;
