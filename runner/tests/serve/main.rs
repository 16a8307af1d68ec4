//! `hopfuse serve` end to end, without a GPU: each test starts the real binary on a free port
//! (with the fake worker where it runs jobs) and talks HTTP to it.
//!
//! `support` starts and stops the service and speaks HTTP to it; the tests are grouped by what
//! they cover: `http` (the API's surface: compile, static files, limits, token, CORS, rate
//! limits, no GPU), `runs` (jobs and workers: results, faults, warm workers, A/B, profile, load)
//! and `state` (what outlives a request: links and history across restarts, retention, compile
//! slots and shutdown), `connections` (clients that do not send, the connection cap) and `tune`
//! (tune jobs: their events and result, their checks, cancelling).

mod connections;
mod http;
mod runs;
mod state;
mod support;
mod tune;
