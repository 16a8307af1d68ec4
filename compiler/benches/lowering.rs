//! Lowering + emission time per example (parse → schedule → every pass → CUDA), release build.
//! Run: `cargo bench -p hopfuse --bench lowering`. Prints a Markdown table.

use std::time::Instant;

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files = Vec::new();
    for group in std::fs::read_dir(&root).expect("examples/") {
        let group = group.expect("entry").path();
        if group.is_dir() {
            for f in std::fs::read_dir(&group).expect("group") {
                let f = f.expect("entry").path();
                if f.extension().is_some_and(|e| e == "hf") {
                    files.push(f);
                }
            }
        }
    }
    files.sort();
    println!("| example | median | min | max | runs |");
    println!("| --- | --- | --- | --- | --- |");
    for path in files {
        let src = std::fs::read_to_string(&path).expect("read");
        let options = hopfuse::CompileOptions::default();
        for _ in 0..20 {
            std::hint::black_box(hopfuse::compile(&src, &options).expect("compiles"));
        }
        let mut times: Vec<f64> = (0..300)
            .map(|_| {
                let t = Instant::now();
                std::hint::black_box(
                    hopfuse::compile(std::hint::black_box(&src), &options).expect("compiles"),
                );
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let name = path.strip_prefix(&root).unwrap_or(&path).display();
        println!(
            "| {name} | {:.3} ms | {:.3} ms | {:.3} ms | {} |",
            times[times.len() / 2],
            times[0],
            times[times.len() - 1],
            times.len()
        );
    }
}
