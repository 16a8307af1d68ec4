//! The service's compiles (`POST /api/compile`, the lowering of `POST /api/inspect` and the
//! checks of `POST /api/run`): at most `slots` at once, each on a blocking thread, each request
//! within a deadline.
//!
//! Takes a closure that compiles; guarantees that the slot it ran in is held until the closure
//! returns, whatever happened to the request that started it (its client disconnected, so its
//! handler was dropped, or its deadline passed): the permit moves into the blocking task, so an
//! abandoned compile still counts against the limit and cannot be joined by new ones. The
//! deadline covers the wait for a slot and the compile; past it the request gets its answer
//! (an error) at once and the compile is cancelled (`hopfuse::Cancel`: the work runs in a
//! cancellation scope, and every compile in it stops at its next schedule statement or pass),
//! so its slot is free soon after the deadline rather than when a slow compile would have
//! finished. A compile whose request went away is cancelled the same way. Shutdown does not wait for compiles (see `serve::main`).

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;

pub struct CompileSlots {
    slots: Arc<Semaphore>,
    total: usize,
    deadline: Duration,
    /// A test hook: sleep this long on the blocking thread before compiling (0 in service).
    test_delay: Duration,
}

/// Why a compile gave no answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Refused {
    /// Every slot stayed busy until the deadline.
    Busy { deadline: Duration },
    /// The compile started but did not finish before the deadline.
    Deadline { deadline: Duration },
    /// The compile panicked (a compiler bug).
    Panicked,
}

impl CompileSlots {
    pub fn new(total: usize, deadline: Duration, test_delay: Duration) -> CompileSlots {
        let total = total.max(1);
        CompileSlots {
            slots: Arc::new(Semaphore::new(total)),
            total,
            deadline,
            test_delay,
        }
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// Compiles running now, including abandoned ones.
    pub fn running(&self) -> usize {
        self.total - self.slots.available_permits()
    }

    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Runs `work` on a blocking thread in a slot, within the deadline.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Refused> {
        let deadline = self.deadline;
        let until = Instant::now() + deadline;
        let permit = tokio::time::timeout_at(until, self.slots.clone().acquire_owned())
            .await
            .map_err(|_| Refused::Busy { deadline })?
            .expect("the compile semaphore is never closed");
        let delay = self.test_delay;
        let cancel = CancelOnDrop(hopfuse::Cancel::default());
        let flag = cancel.0.clone();
        let task = tokio::task::spawn_blocking(move || {
            // The slot follows the work: released when the compile returns, not when the
            // request goes away.
            let _permit = permit;
            // The test delay stands for a slow compile, which stops when cancelled.
            let delay_until = std::time::Instant::now() + delay;
            while std::time::Instant::now() < delay_until && !flag.is_cancelled() {
                std::thread::sleep(Duration::from_millis(5));
            }
            flag.scope(work)
        });
        match tokio::time::timeout_at(until, task).await {
            // (`cancel` goes out of scope here, as it does when the request goes away.)
            Err(_) => Err(Refused::Deadline { deadline }),
            Ok(Err(_)) => Err(Refused::Panicked),
            Ok(Ok(value)) => Ok(value),
        }
    }
}

/// Cancels the compile when the request stops waiting for it: past the deadline, or dropped.
struct CancelOnDrop(hopfuse::Cancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_abandoned_compile_keeps_its_slot_until_it_returns() {
        let slots = Arc::new(CompileSlots::new(
            1,
            Duration::from_secs(30),
            Duration::ZERO,
        ));
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let s = slots.clone();
        let request = tokio::spawn(async move {
            s.run(move || {
                let _ = wait.recv();
            })
            .await
        });
        while slots.running() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The client goes away: its handler (this task) is dropped mid-compile.
        request.abort();
        let _ = request.await;
        assert_eq!(
            slots.running(),
            1,
            "the compile still runs and holds its slot"
        );
        release.send(()).unwrap();
        let start = std::time::Instant::now();
        while slots.running() != 0 {
            assert!(start.elapsed() < Duration::from_secs(10));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_deadline_covers_the_wait_and_the_compile() {
        let slots = Arc::new(CompileSlots::new(
            1,
            Duration::from_millis(200),
            Duration::ZERO,
        ));
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let start = Instant::now();
        let slow = slots
            .run(move || {
                let _ = wait.recv();
            })
            .await;
        assert_eq!(
            slow,
            Err(Refused::Deadline {
                deadline: Duration::from_millis(200)
            })
        );
        assert!(start.elapsed() < Duration::from_secs(5));
        // The slot is still taken by the compile past its deadline: the next request waits
        // for it and gives up at its own deadline.
        assert_eq!(
            slots.run(|| 1).await,
            Err(Refused::Busy {
                deadline: Duration::from_millis(200)
            })
        );
        release.send(()).unwrap();
        let start = std::time::Instant::now();
        while slots.running() != 0 {
            assert!(start.elapsed() < Duration::from_secs(10));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(slots.run(|| 7).await, Ok(7));
        // A deadline that a panic (and its backtrace on a busy machine) stays well inside.
        let roomy = CompileSlots::new(1, Duration::from_secs(60), Duration::ZERO);
        let panicked: Result<(), Refused> = roomy.run(|| panic!("a compiler bug")).await;
        assert_eq!(panicked, Err(Refused::Panicked));
    }

    /// Work that checks for cancellation (as the compiler does between statements and passes)
    /// stops at the deadline, or when its request goes away, and frees its slot.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_compile_past_its_deadline_or_abandoned_is_cancelled() {
        let slots = Arc::new(CompileSlots::new(
            1,
            Duration::from_millis(200),
            Duration::ZERO,
        ));
        let until_cancelled = || {
            let start = std::time::Instant::now();
            while hopfuse::Cancel::check().is_ok() {
                assert!(start.elapsed() < Duration::from_secs(60), "never cancelled");
                std::thread::sleep(Duration::from_millis(1));
            }
            start.elapsed()
        };
        let answered = slots.run(until_cancelled).await;
        assert_eq!(
            answered,
            Err(Refused::Deadline {
                deadline: Duration::from_millis(200)
            })
        );
        let freed = std::time::Instant::now();
        while slots.running() != 0 {
            assert!(
                freed.elapsed() < Duration::from_secs(2),
                "the slot stays taken"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        assert_eq!(slots.run(|| 7).await, Ok(7));
        // The client goes away before the deadline: cancelled at once.
        let roomy = Arc::new(CompileSlots::new(
            1,
            Duration::from_secs(60),
            Duration::ZERO,
        ));
        let s = roomy.clone();
        let request = tokio::spawn(async move { s.run(until_cancelled).await });
        while roomy.running() == 0 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        request.abort();
        let _ = request.await;
        let gone = std::time::Instant::now();
        while roomy.running() != 0 {
            assert!(
                gone.elapsed() < Duration::from_secs(2),
                "the slot stays taken"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}
