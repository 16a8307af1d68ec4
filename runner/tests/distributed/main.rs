//! The distributed mode end to end, without a GPU: real `nats-server`s (JetStream, file
//! storage; each test starts, stops and restarts its own on a free loopback port), PostgreSQL
//! (`HOPFUSE_TEST_POSTGRES_URL`; each test makes a database of its own), `hopfuse serve
//! --queue` front-ends and `hopfuse agent --fake-worker` GPU hosts, all as real processes.
//! `scripts/setup-distributed.sh` provides the servers; without them the tests report that they
//! did not run (and fail where `HOPFUSE_REQUIRE_NATS` / `HOPFUSE_REQUIRE_POSTGRES` is set).//!
//! `support` starts and stops the servers and processes and speaks HTTP and SSE to them; `load`
//! has the 1,000 jobs across two front-ends and the full stream's 429; `recovery` what survives
//! a failure: an agent killed mid-job, a NATS restart, a result stored before the ack, a job
//! past its attempts.

mod load;
mod recovery;
mod support;
