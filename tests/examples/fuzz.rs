//! The long fuzz of issue 11: many programs through the whole compiler, each timed, none may
//! panic or take over a second, and every diagnostic should carry a location.
//!
//! `cargo run --release -p hopfuse-tests --example fuzz -- [PROGRAMS] [SEED] [HOST:PORT]`
//! (default 100000, 1). With HOST:PORT every program is also posted to that `hopfuse serve`'s
//! `POST /api/compile` (start it with `--requests-per-minute 0`): each answer must be 200 or a
//! 4xx with a JSON error, never a 5xx or a dropped connection, and the service must stay up. Programs: every example (basics, TMA, warp-specialized) with 1-6 random edits drawn from
//! the language's whole vocabulary (tokens, ops, schedule primitives and their arguments), random
//! token soups, and the 64 KiB stress shapes. Prints a Markdown summary; exits 1 on a panic or a
//! program over 1 s.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::io::{Read, Write};
use std::time::Instant;

/// Posts `program` to `POST /api/compile` of the service at `addr` (one connection per
/// request); returns the HTTP status, or why there was none.
fn post_compile(addr: &str, program: &str) -> Result<u16, String> {
    let body = serde_json::json!({ "program": program }).to_string();
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .ok();
    write!(
        s,
        "POST /api/compile HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .map_err(|e| format!("send: {e}"))?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)
        .map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| {
            format!(
                "no status line in {:?}",
                text.chars().take(80).collect::<String>()
            )
        })?;
    if (400..500).contains(&status) && !text.contains("\"error\"") {
        return Err(format!("{status} without a JSON error"));
    }
    Ok(status)
}

const VOCAB: &[&str] = &[
    "fusion",
    "schedule",
    "input",
    "output",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ",",
    ":",
    "=",
    "+",
    "-",
    "*",
    "/",
    ".",
    "\n",
    "x",
    "y",
    "x_s",
    "y_s",
    "t",
    "M",
    "N",
    "K",
    "f32",
    "bf16",
    "f16",
    "i32",
    "f64",
    "0",
    "1",
    "2",
    "4",
    "8",
    "16",
    "64",
    "128",
    "256",
    "1024",
    "-1",
    "3000000000",
    "1e39",
    "split",
    "merge",
    "reorder",
    "parallelize",
    "propagate",
    "inline_most",
    "inline_at",
    "compute_at",
    "rfactor",
    "set_memory",
    "cache_after",
    "cache_before",
    "circular_buffer",
    "warp_specialized",
    "registers",
    "warp",
    "prefetch",
    "war",
    "mbarrier",
    "sync",
    "TIDx",
    "TIDy",
    "TIDz",
    "BIDx",
    "BIDy",
    "Bulk",
    "Mma",
    "Vectorize",
    "Unroll",
    "Serial",
    "memory",
    "shared",
    "local",
    "global",
    "load",
    "store",
    "tma",
    "bulk",
    "plain",
    "swizzle",
    "fence",
    "analysis",
    "outer",
    "inner",
    "sum",
    "max",
    "min",
    "exp",
    "tanh",
    "relu",
    "broadcast",
    "cast",
    "axis",
    "int",
    "threadIdx",
    "__LINE__",
    // The op table's vocabulary (fusion/ops.rs).
    "where",
    "clamp",
    "lerp",
    "gelu",
    "approximate",
    "remainder",
    "bitwise_left_shift",
    "bitwise_not",
    "logical_and",
    "isnan",
    "log1p",
    "round",
    "bool",
    " < ",
    " <= ",
    " == ",
    " != ",
    " = 1e-6",
    // The random numbers (issue 33).
    "rand",
    "randn",
    "rand(x, 7, 0)",
    "input seed: i64",
    // Tuple assignment.
    "var_mean",
    "v, m = var_mean(x, axis=1)",
    ", ",
    // A variance in one pass, the schedule's choice, and the sums it replaces (issue 33).
    "welford",
    "welford(v)",
    "v_sum",
    "m_sum",
    "recompute",
    "online_logsumexp",
    "online_logsumexp(lse)",
];

fn mutate(src: &str, rng: &mut ChaCha8Rng) -> String {
    let mut s = src.to_string();
    for _ in 0..rng.random_range(1..=6) {
        let mut p = rng.random_range(0..=s.len());
        while !s.is_char_boundary(p) {
            p -= 1;
        }
        let tok = VOCAB[rng.random_range(0..VOCAB.len())];
        match rng.random_range(0..3) {
            0 => s.insert_str(p, tok),
            1 => {
                let end = (p + rng.random_range(1..8)).min(s.len());
                if s.is_char_boundary(end) {
                    s.replace_range(p..end, "");
                }
            }
            _ => {
                let end = (p + 1).min(s.len());
                if s.is_char_boundary(end) {
                    s.replace_range(p..end, tok);
                }
            }
        }
    }
    s
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .map_or(100_000, |a| a.parse().expect("PROGRAMS"));
    let seed: u64 = args.next().map_or(1, |a| a.parse().expect("SEED"));
    let service = args.next();
    let (mut served, mut service_failures) = (0usize, Vec::<String>::new());
    let mut service_times: Vec<f64> = Vec::new();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let ex = hopfuse_tests::example_sources();
    let stress = hopfuse_tests::stress::all();
    let (mut ok, mut errors, mut unlocated, mut panics, mut slow) =
        (0usize, 0usize, 0usize, 0usize, 0usize);
    let mut unlocated_examples: Vec<String> = Vec::new();
    let mut times: Vec<f64> = Vec::with_capacity(n);
    let (mut worst, mut worst_src) = (0.0f64, String::new());
    std::panic::set_hook(Box::new(|_| {}));
    let started = Instant::now();
    for i in 0..n {
        let src = match i % 20 {
            0 => {
                let len = rng.random_range(0..80);
                (0..len)
                    .map(|_| VOCAB[rng.random_range(0..VOCAB.len())])
                    .collect::<Vec<_>>()
                    .join(" ")
            }
            1 if i % 1000 == 1 => stress[(i / 1000) % stress.len()].1.clone(),
            _ => mutate(&ex[rng.random_range(0..ex.len())], &mut rng),
        };
        let t = Instant::now();
        let outcome = std::panic::catch_unwind(|| hopfuse::compile(&src, &Default::default()));
        let secs = t.elapsed().as_secs_f64();
        times.push(secs);
        if secs > worst {
            worst = secs;
            worst_src = src.chars().take(200).collect();
        }
        if secs > 1.0 {
            slow += 1;
        }
        if let Some(addr) = &service {
            let t = Instant::now();
            match post_compile(addr, &src) {
                Ok(status) if status < 500 => served += 1,
                Ok(status) => service_failures.push(format!("program {i}: HTTP {status}")),
                Err(e) => service_failures.push(format!("program {i}: {e}")),
            }
            service_times.push(t.elapsed().as_secs_f64());
        }
        match outcome {
            Ok(Ok(_)) => ok += 1,
            Ok(Err(d)) => {
                errors += 1;
                if d.0.iter().any(|d| d.span.is_none()) {
                    unlocated += 1;
                    if unlocated_examples.len() < 10 {
                        let m =
                            d.0.iter()
                                .find(|d| d.span.is_none())
                                .unwrap()
                                .message
                                .clone();
                        if !unlocated_examples.contains(&m) {
                            eprintln!("UNLOCATED diagnostic on program {i}: {m}\n{src}\n");
                            unlocated_examples.push(m);
                        }
                    }
                }
            }
            Err(_) => {
                panics += 1;
                eprintln!("PANIC on program {i}:\n{src}\n");
            }
        }
    }
    times.sort_by(f64::total_cmp);
    let pct = |q: f64| times[((times.len() - 1) as f64 * q) as usize] * 1e3;
    println!(
        "fuzz: {n} programs, seed {seed}, {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
    println!();
    println!("| outcome | programs |");
    println!("| --- | --- |");
    println!("| lowered | {ok} |");
    println!("| rejected with a diagnostic | {errors} |");
    println!("| of which some diagnostic has no location | {unlocated} |");
    println!("| panicked | {panics} |");
    println!("| over 1 s | {slow} |");
    println!();
    println!(
        "compile time: median {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        pct(0.5),
        pct(0.99),
        worst * 1e3
    );
    println!("slowest program starts: {:?}", worst_src);
    for m in &unlocated_examples {
        println!("unlocated: {m}");
    }
    if let Some(addr) = &service {
        service_times.sort_by(f64::total_cmp);
        let max = service_times.last().copied().unwrap_or(0.0);
        println!();
        println!(
            "service {addr}: {served} answered (200 or 4xx with a JSON error), {} failed; request time median {:.3} ms, max {:.1} ms",
            service_failures.len(),
            service_times.get(service_times.len() / 2).copied().unwrap_or(0.0) * 1e3,
            max * 1e3
        );
        for f in service_failures.iter().take(10) {
            println!("service failure: {f}");
        }
        if !service_failures.is_empty() || max > 1.0 {
            std::process::exit(1);
        }
    }
    if panics > 0 || slow > 0 {
        std::process::exit(1);
    }
}
