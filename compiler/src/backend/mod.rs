//! The back ends: what a fusion or its lowered kernel becomes.
//!
//! - [`codegen`]: the final kernel IR to one self-contained `.cu`, its launch plan and line map.
//! - [`pipeline_view`]: the final kernel's pipelines (loads, waits, products, epilogue) as data.
//! - [`torch`]: the unscheduled fusion as the PyTorch a user would write (the peers' twin).
//! - [`reference`]: the unscheduled fusion's math in float64, in pieces for any executor.
//!
//! Each reads the IR above it and nothing here reads another back end, so a back end is added
//! or changed without touching the rest of the compiler.

pub mod codegen;
pub mod pipeline_view;
pub mod reference;
pub mod torch;
