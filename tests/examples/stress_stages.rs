//! Where the lowering of one stress program (`hopfuse_tests::stress`) spends its time, stage by
//! stage: `cargo run --release -p hopfuse-tests --example stress_stages -- "repeated propagate"`
//! (no argument: every shape). Prints the parse + build + schedule time, each pass's, and the
//! whole compile's.
use std::time::Instant;

fn main() {
    let only = std::env::args().nth(1);
    for (name, src) in hopfuse_tests::stress::all() {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        println!("{name} ({} bytes)", src.len());
        let t = Instant::now();
        let scheduled = match hopfuse::schedule(&src) {
            Ok((_, s)) => s,
            Err(d) => {
                println!("  rejected after {:.1?}: {}", t.elapsed(), d.0[0].message);
                continue;
            }
        };
        println!("  schedule: {:.1?}", t.elapsed());
        let options = hopfuse::CompileOptions::default();
        let mut lowering = hopfuse::Lowering::new(&scheduled, &options);
        for pass in hopfuse::passes::PIPELINE {
            let t = Instant::now();
            match lowering.run(pass) {
                Ok(Some(_)) => println!("  {}: {:.1?}", pass.name, t.elapsed()),
                Ok(None) => {}
                Err(d) => {
                    println!("  {} rejected: {}", pass.name, d.0[0].message);
                    break;
                }
            }
        }
        let t = Instant::now();
        let outcome = hopfuse::compile(&src, &options).map(|c| c.cuda.len());
        println!(
            "  whole compile: {:.1?} ({outcome:?} bytes of CUDA)",
            t.elapsed()
        );
    }
}
