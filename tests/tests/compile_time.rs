//! A compile's time is bounded: random schedules over large fusions, within the service's
//! 64 KiB program limit, lower (or are rejected with a located error) within a bound (the
//! compiling thread's CPU time where the system says it: the suite runs on shared cores), and a
//! compile in a cancelled `hopfuse::Cancel` scope stops at its next statement or pass.

use proptest::prelude::*;
use std::time::{Duration, Instant};

/// The bound on one compile of a random program: the service's default compile deadline is
/// 10 s; debug builds (the test suite's) lower about ten times slower than release.
fn bound() -> Duration {
    Duration::from_secs(if cfg!(debug_assertions) { 20 } else { 2 })
}

/// The CPU time of the calling thread, where Linux says it (`/proc/thread-self/schedstat`):
/// unlike the wall time it does not grow when other work shares the cores.
fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(Duration::from_nanos(
        stat.split_whitespace().next()?.parse().ok()?,
    ))
}

/// `f`'s result and the time it took: the thread's CPU time where the system says it, else the
/// wall time.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let (cpu, wall) = (thread_cpu(), Instant::now());
    let out = f();
    let took = match (cpu, thread_cpu()) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => wall.elapsed(),
    };
    (out, took)
}

/// One schedule statement on `t{k}` of a chain of `n` (the output is `t{n-1}`).
fn statement(n: usize, (kind, k, factor): (usize, usize, i64)) -> String {
    let t = format!("t{}", k % n);
    match kind {
        0 => format!("  propagate({t})"),
        1 => format!("  {t}.split(0, {factor})"),
        2 => format!("  {t}.merge(0)"),
        3 => format!("  {t}.parallelize(0, BIDx)"),
        4 => format!("  {t}.parallelize(1, TIDx)"),
        5 => format!("  {t}.set_memory(local)"),
        6 => "  inline_most()".to_string(),
        _ => format!("  {t}.reorder(0, 1)"),
    }
}

/// A chain of `n` statements whose output is split `splits` times, then `stmts` repeated
/// (cycled) as many times as fit in 64 KiB.
fn program(n: usize, splits: usize, stmts: &[(usize, usize, i64)]) -> String {
    let cycle: Vec<String> = stmts.iter().map(|&s| statement(n, s)).collect();
    hopfuse_tests::stress::split_chain_then(n, splits, move |_| cycle.into_iter().cycle())
}

proptest! {
    // Few cases: each is a 64 KiB program (the suite's time), from a fixed seed (a gate must
    // not fail by chance).
    #![proptest_config(ProptestConfig {
        cases: 6,
        rng_seed: proptest::test_runner::RngSeed::Fixed(39),
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_programs_within_the_limit_lower_within_the_bound(
        n in 2usize..1500,
        splits in 0usize..24,
        stmts in proptest::collection::vec((0usize..8, 0usize..3000, 1i64..5), 1..6),
    ) {
        let src = program(n, splits, &stmts);
        prop_assert!(src.len() <= hopfuse_tests::stress::PROGRAM_LIMIT);
        let (outcome, took) = timed(|| hopfuse::compile(&src, &Default::default()));
        prop_assert!(took < bound(), "{took:?} for {} bytes: {stmts:?}", src.len());
        if let Err(d) = outcome {
            prop_assert!(d.0.iter().all(|d| d.span.is_some()), "{}", d.render(&src, "p.hf"));
        }
    }
}

/// Issue 39's program (a split chain propagated about 2,450 times; 80 s before) is rejected at
/// the propagates' limit, quickly.
#[test]
fn repeated_propagate_is_rejected_quickly() {
    let src = hopfuse_tests::stress::repeated_propagate();
    let (e, took) = timed(|| hopfuse_tests::error(&src));
    assert!(took < bound(), "{took:?}");
    assert!(
        e.contains("propagates would replay more than 2000000 axes in all"),
        "{e}"
    );
}

/// Issue 39's slowest legal shape: a 3,000-statement chain split to the loop-axis limit and
/// propagated (24 loops per tensor, 4.1 MB of CUDA) lowers within a bound that the code before
/// the fix exceeded: the split's root indices were rebuilt by cloning each level's tree and every
/// path of the derivation was walked, quadratic in the splits. Measured on the 2-core build
/// machine in thread CPU time (docs/benchmarks.md): debug build 3.1 s before, 1.5 s after;
/// release 0.88 s before, 0.34 s after. The later 2.7-3.0 s debug / 0.65 s release is the
/// machine, not the code: the fix's own commit (1cf8f51), built and run beside main on
/// 2026-11-29, lowers it in 641 ms against main's 677 ms (`--example stress_stages`, release).
/// So the bounds are 4 s debug and 1.2 s release, under what the quadratic form takes on the
/// slower machine (about twice the figures above).
#[test]
fn the_deep_split_chain_lowers_within_the_bound() {
    let src = hopfuse_tests::stress::split_chain();
    assert!(src.len() <= hopfuse_tests::stress::PROGRAM_LIMIT);
    let bound = Duration::from_millis(if cfg!(debug_assertions) { 4000 } else { 1200 });
    // The best of up to three lowerings: on a 2-core machine shared with other builds one
    // lowering's CPU time varies by a second (cache misses), the quadratic cost does not.
    let mut took = Vec::new();
    let cuda = loop {
        let (cuda, t) = timed(|| hopfuse_tests::compile(&src).cuda);
        took.push(t);
        if t < bound || took.len() == 3 {
            break cuda;
        }
    };
    assert!(took.iter().any(|t| *t < bound), "{took:?}");
    // Every tensor of the chain is computed under its 24 loops.
    assert!(cuda.len() > 4_000_000, "{} bytes of CUDA", cuda.len());
}

/// A compile whose scope is cancelled mid-way returns the cancellation error soon after, and
/// one whose flag was set before it started does no work at all.
#[test]
fn a_cancelled_compile_stops() {
    let src = hopfuse_tests::stress::split_chain();
    let flag = hopfuse::Cancel::default();
    let scoped = flag.clone();
    let compile = std::thread::spawn(move || {
        scoped.scope(|| {
            let start = Instant::now();
            (
                hopfuse::compile(&src, &Default::default()).map(|_| ()),
                start.elapsed(),
            )
        })
    });
    std::thread::sleep(Duration::from_millis(100));
    let cancelled_at = Instant::now();
    flag.cancel();
    let (outcome, took) = compile.join().unwrap();
    let after = cancelled_at.elapsed();
    match outcome {
        Err(d) => assert!(
            d.0[0].message.starts_with(hopfuse::cancel::CANCELLED),
            "{}",
            d.0[0].message
        ),
        // Only a machine that lowers this program in 100 ms may finish first.
        Ok(()) => assert!(took < Duration::from_millis(150), "{took:?}"),
    }
    assert!(after < bound(), "{after:?} after the cancel");
    let start = Instant::now();
    let again =
        flag.scope(|| hopfuse::compile(&hopfuse_tests::stress::split_chain(), &Default::default()));
    assert!(again.is_err());
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}
