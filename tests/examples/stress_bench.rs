//! Lowering time of the 64 KiB stress programs (`hopfuse_tests::stress`) and of every example
//! program (`examples/*/*.hf`), in process: `cargo run --release -p hopfuse-tests --example
//! stress_bench` (an argument: only the rows whose name contains it). Prints a Markdown table
//! per group: the median and the maximum of up to 9 runs after one warm-up (fewer for a program
//! that takes over a second, so the whole bench stays short), the mean CPU time of the
//! compiling thread (Linux: `/proc/thread-self/schedstat`; it moves less than the wall time when
//! other work shares the cores, but some kernels count it in scheduler ticks of a few ms, so
//! below ~10 ms it is coarse), and the outcome: lowered or the rejection's rule.
use std::time::Instant;

/// Runs per row, and the time after which a row stops early (at least 3 runs).
const RUNS: usize = 9;
const ROW_BUDGET_S: f64 = 5.0;

/// Nanoseconds this thread has run on a CPU (`None` where the kernel does not say).
fn thread_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn row(name: &str, src: &str) {
    let options = hopfuse::CompileOptions::default();
    let outcome = match hopfuse::compile(src, &options) {
        Ok(c) => format!("lowered ({} lines of CUDA)", c.cuda.lines().count()),
        Err(d) => format!(
            "rejected: {}",
            d.0[0].message.chars().take(60).collect::<String>()
        ),
    };
    let (mut times, mut cpu) = (Vec::new(), Vec::new());
    let start = Instant::now();
    while times.len() < RUNS && (times.len() < 3 || start.elapsed().as_secs_f64() < ROW_BUDGET_S) {
        let (t, c) = (Instant::now(), thread_cpu_ns());
        let _ = std::hint::black_box(hopfuse::compile(std::hint::black_box(src), &options));
        times.push(t.elapsed().as_secs_f64() * 1e3);
        if let (Some(c0), Some(c1)) = (c, thread_cpu_ns()) {
            cpu.push(c1.saturating_sub(c0) as f64 / 1e6);
        }
    }
    let max = times.iter().copied().fold(0.0, f64::max);
    let cpu = if cpu.len() == times.len() {
        format!("{:.2} ms", cpu.iter().sum::<f64>() / cpu.len() as f64)
    } else {
        "-".to_string()
    };
    println!(
        "| {name} | {} | {outcome} | {:.2} ms | {:.2} ms | {cpu} |",
        src.len(),
        median(times),
        max
    );
}

fn main() {
    let only = std::env::args().nth(1);
    let wanted = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    println!("| shape | bytes | outcome | median | max | CPU |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (name, src) in hopfuse_tests::stress::all() {
        if wanted(name) {
            row(name, &src);
        }
    }
    println!();
    println!("| example | bytes | outcome | median | max | CPU |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for example in hopfuse_tests::examples() {
        let name = example.id();
        if wanted(&name) {
            let src = std::fs::read_to_string(&example.path).expect("read the example");
            row(&name, &src);
        }
    }
}
