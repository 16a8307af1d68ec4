//! Lowering time of the 64 KiB stress programs (`hopfuse_tests::stress`) and of every example
//! program (`examples/*/*.hf`), in process: `cargo run --release -p hopfuse-tests --example
//! stress_bench` (an argument: only the rows whose name contains it). Prints a Markdown table
//! per group: the median and the maximum of up to 9 runs after one warm-up (fewer for a program
//! that takes over a second, so the whole bench stays short), and the outcome: lowered or the
//! rejection's rule.
use std::time::Instant;

/// Runs per row, and the time after which a row stops early (at least 3 runs).
const RUNS: usize = 9;
const ROW_BUDGET_S: f64 = 5.0;

fn row(name: &str, src: &str) {
    let options = hopfuse::CompileOptions::default();
    let outcome = match hopfuse::compile(src, &options) {
        Ok(c) => format!("lowered ({} lines of CUDA)", c.cuda.lines().count()),
        Err(d) => format!(
            "rejected: {}",
            d.0[0].message.chars().take(60).collect::<String>()
        ),
    };
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < RUNS && (times.len() < 3 || start.elapsed().as_secs_f64() < ROW_BUDGET_S) {
        let t = Instant::now();
        let _ = std::hint::black_box(hopfuse::compile(std::hint::black_box(src), &options));
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "| {name} | {} | {outcome} | {:.2} ms | {:.2} ms |",
        src.len(),
        times[times.len() / 2],
        times[times.len() - 1]
    );
}

fn main() {
    let only = std::env::args().nth(1);
    let wanted = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    println!("| shape | bytes | outcome | median | max |");
    println!("| --- | --- | --- | --- | --- |");
    for (name, src) in hopfuse_tests::stress::all() {
        if wanted(name) {
            row(name, &src);
        }
    }
    println!();
    println!("| example | bytes | outcome | median | max |");
    println!("| --- | --- | --- | --- | --- |");
    for example in hopfuse_tests::examples() {
        let name = example.id();
        if wanted(&name) {
            let src = std::fs::read_to_string(&example.path).expect("read the example");
            row(&name, &src);
        }
    }
}
