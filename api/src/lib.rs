//! The wire types of the `hopfuse serve` API (docs/api.md): what its endpoints take and answer,
//! and what a run measures. Defined once, here, and used by both ends: the runner serialises
//! them (`runner/src/serve/`, the queue, the worker's JSON lines) and the playground
//! deserialises them (`web/src/runner/`, `web/src/inspect_panes.rs`). Pure serde data with a
//! few pure helpers (no I/O), so the crate builds for `wasm32-unknown-unknown`.
//!
//! - [`run`]: a run's request ([`run::RunRequest`]), its result ([`run::RunResult`]) and the
//!   pieces of a measurement (device, timing, validation, ceilings, peers).
//! - [`job`]: the queue's view of a run: stages and events of the SSE stream, the final
//!   [`job::JobResult`], and the queue's counters for `/api/health`.
//! - [`service`]: the bodies and answers of the endpoints (health, compile, run, links, run
//!   history).
//! - [`tune`]: a tune job (`POST /api/tune`): its body, its candidates' progress and its result.
//! - [`distributed`]: the distributed mode's stream and agents in `/api/health`.
//! - [`inspect`]: `POST /api/inspect`: PTX and SASS listings tied to CUDA lines.
//! - [`profile`]: a run's Nsight Compute profile (`result.profile`) and its roofline SVG.
//!
//! The JSON of every type is the wire format docs/api.md describes; `runner/tests/api_fixtures.rs`
//! pins the `done` events in `web/tests/fixtures/`.

pub mod distributed;
pub mod inspect;
pub mod job;
pub mod profile;
pub mod run;
pub mod service;
pub mod tune;
