//! Lowering time of the 64 KiB stress programs (`hopfuse_tests::stress`), in process:
//! `cargo run --release -p hopfuse-tests --example stress_bench`. Prints a Markdown table
//! (median of 9 runs after one warm-up; the outcome: lowered or the rejection's rule).
use std::time::Instant;

fn main() {
    println!("| shape | bytes | outcome | median | max |");
    println!("| --- | --- | --- | --- | --- |");
    for (name, src) in hopfuse_tests::stress::all() {
        let options = hopfuse::CompileOptions::default();
        let outcome = match hopfuse::compile(&src, &options) {
            Ok(c) => format!("lowered ({} lines of CUDA)", c.cuda.lines().count()),
            Err(d) => format!(
                "rejected: {}",
                d.0[0].message.chars().take(60).collect::<String>()
            ),
        };
        let mut times: Vec<f64> = (0..9)
            .map(|_| {
                let t = Instant::now();
                let _ =
                    std::hint::black_box(hopfuse::compile(std::hint::black_box(&src), &options));
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!(
            "| {name} | {} | {outcome} | {:.1} ms | {:.1} ms |",
            src.len(),
            times[4],
            times[8]
        );
    }
}
