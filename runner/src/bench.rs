//! `hopfuse bench`: runs every example (or the given programs) on the GPU and prints a Markdown
//! table: example, size, time, GB/s, ceiling, ratio, validation (and the runs' warnings below it).
//!
//! The runs go through one warm `hopfuse worker --serve` process, as the service's do: the
//! worker opens the GPU and measures the device-copy ceiling once, every run reuses both, a
//! run past the time limit is killed (SIGKILL) and a fault (an illegal address poisons the
//! context) ends the worker, and the next run gets a fresh one. Sizes come from `--size` or
//! from the program's `// bench: M=16384,N=16384` lines (one row per line); a fusion whose
//! extents are all constants needs none (no line, or an empty `// bench:` line).

use crate::engine::{PairRatios, RunRequest, RunResult};
use crate::job_spec::JobSpec;
use crate::profile::ProfileLimits;
use crate::sizes;
use crate::warm::{JobEnd, WarmWorker, WorkerCommand};
use crate::worker::{Outcome, Part, WorkerEvent, WorkerJob};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The marker of a program's benchmark sizes.
pub const BENCH_PREFIX: &str = "// bench:";

/// The sizes of a program's `// bench: NAME=VALUE,...` lines, in order.
pub fn bench_sizes(source: &str) -> Result<Vec<BTreeMap<String, i64>>, String> {
    source
        .lines()
        .enumerate()
        .filter_map(|(i, l)| l.trim().strip_prefix(BENCH_PREFIX).map(|rest| (i, rest)))
        .map(|(i, rest)| sizes::parse_sizes(rest).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

/// `ROOT/*/*.hf` (the examples, [`hopfuse::examples::list`]), sorted by group and name.
pub fn example_files(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    Ok(hopfuse::examples::list(root)?
        .into_iter()
        .map(|e| e.path)
        .collect())
}

/// What `hopfuse bench` runs.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub files: Vec<PathBuf>,
    /// `--size` for every program (else each program's `// bench:` lines).
    pub sizes: Option<BTreeMap<String, i64>>,
    pub iters: u32,
    pub warmup: u32,
    pub seed: u64,
    /// Integer inputs filled with packed-document ids (`--documents`), by name: the mean
    /// length (`RunRequest::documents`); every program's run gets them.
    pub documents: BTreeMap<String, NonZeroU32>,
    /// Per run, from sending it to the worker to its result.
    pub timeout: Duration,
    pub worker: WorkerCommand,
    pub cubin_cache: Option<PathBuf>,
    /// Time each program's torch twin too (`--peers`): the table gets the peers' columns.
    pub peers: bool,
    /// Probe each kernel's SM clock (`--clock`): the table gets the clock's columns.
    pub clock: bool,
    /// Compile each kernel generic over its sizes (`--generic`), not specialised to them.
    pub generic: bool,
}

/// One row of the table.
#[derive(Clone, Debug)]
pub struct Row {
    pub example: String,
    pub sizes: String,
    pub outcome: RowOutcome,
}

#[derive(Clone, Debug)]
pub enum RowOutcome {
    Measured(Box<RunResult>),
    /// Compiled and checked by the fake worker; nothing measured.
    Fake,
    /// Not run: why (an error, a timeout, a crash, no sizes).
    NotRun(String),
}

impl Row {
    pub fn ok(&self) -> bool {
        match &self.outcome {
            RowOutcome::Measured(r) => r.passed,
            RowOutcome::Fake => true,
            RowOutcome::NotRun(_) => false,
        }
    }
}

/// The name of a program in the table: its path below `examples/` without `.hf`.
pub fn example_name(file: &Path) -> String {
    let text = file.display().to_string();
    let short = match text.rfind("examples/") {
        Some(i) => &text[i + "examples/".len()..],
        None => &text,
    };
    short.strip_suffix(".hf").unwrap_or(short).to_string()
}

/// Runs every (program, sizes) pair; `progress` gets each row as it is done.
pub async fn run(options: &BenchOptions, progress: &mut dyn FnMut(&Row)) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut warm: Option<WarmWorker> = None;
    for file in &options.files {
        let example = example_name(file);
        let mut push = |row: Row, rows: &mut Vec<Row>| {
            progress(&row);
            rows.push(row);
        };
        let source = match std::fs::read_to_string(file) {
            Ok(s) => s,
            Err(e) => {
                let why = format!("cannot read {}: {e}", file.display());
                push(row(&example, "", RowOutcome::NotRun(why)), &mut rows);
                continue;
            }
        };
        let size_sets = match &options.sizes {
            Some(s) => vec![s.clone()],
            None => match bench_sizes(&source) {
                Ok(s) if s.is_empty() => match symbols(&source) {
                    // A constant fusion runs as it is; one that does not compile runs too, so
                    // its row shows the compile error.
                    None => vec![BTreeMap::new()],
                    Some(symbols) => {
                        let why = format!(
                            "no `{BENCH_PREFIX} M=...,N=...` line for its sizes ({}); give --size",
                            symbols.join(", ")
                        );
                        push(row(&example, "", RowOutcome::NotRun(why)), &mut rows);
                        continue;
                    }
                },
                Ok(s) => s,
                Err(e) => {
                    let why = format!("bad `{BENCH_PREFIX}` {e}");
                    push(row(&example, "", RowOutcome::NotRun(why)), &mut rows);
                    continue;
                }
            },
        };
        for sizes in size_sets {
            let label = sizes::label(&sizes);
            let job = WorkerJob {
                spec: JobSpec::single(RunRequest {
                    file: file.display().to_string(),
                    source: source.clone(),
                    sizes,
                    scalars: Default::default(),
                    iters: options.iters,
                    warmup: options.warmup,
                    seed: options.seed,
                    index: None,
                    copy_ceiling: true,
                    peers: options.peers,
                    clock: options.clock,
                    generic: options.generic,
                    documents: options.documents.clone(),
                }),
                cubin_cache: options.cubin_cache.clone(),
                profile_limits: ProfileLimits::default(),
            };
            let outcome = WarmRuns {
                command: &options.worker,
                timeout: options.timeout,
                warm: &mut warm,
            }
            .run_one(&job)
            .await;
            push(row(&example, &label, outcome), &mut rows);
        }
    }
    if let Some(mut w) = warm {
        w.kill().await;
    }
    rows
}

/// The size symbols of a program that compiles and has some; `None` otherwise.
fn symbols(source: &str) -> Option<Vec<String>> {
    let compilation = hopfuse::compile(source, &hopfuse::CompileOptions::default()).ok()?;
    let symbols = compilation.plan.symbols;
    (!symbols.is_empty()).then_some(symbols)
}

fn row(example: &str, sizes: &str, outcome: RowOutcome) -> Row {
    Row {
        example: example.to_string(),
        sizes: sizes.to_string(),
        outcome,
    }
}

/// Jobs run one after another on a warm worker (`hopfuse worker --serve`), started, or started
/// again after it died, as needed, each within a time limit: `hopfuse bench`'s rows, `hopfuse
/// tune`'s candidates and a tune job's in the service (on its GPU's worker).
pub struct WarmRuns<'w> {
    pub command: &'w WorkerCommand,
    /// Per job, from sending it to the worker to its result.
    pub timeout: Duration,
    pub warm: &'w mut Option<WarmWorker>,
}

impl WarmRuns<'_> {
    /// The warm worker; why not when it does not start.
    async fn worker(&mut self) -> Result<&mut WarmWorker, String> {
        if self.warm.as_mut().is_some_and(|w| !w.is_alive()) {
            *self.warm = None;
        }
        if self.warm.is_none() {
            match WarmWorker::spawn(self.command).await {
                Ok(w) => *self.warm = Some(w),
                Err(e) => {
                    let stderr = e.stderr.trim();
                    return Err(if stderr.is_empty() {
                        format!("the worker did not start: {}", e.message)
                    } else {
                        format!("the worker did not start: {} ({stderr})", e.message)
                    });
                }
            }
        }
        Ok(self.warm.as_mut().expect("a worker"))
    }

    /// Runs one job; its outcome (A's, for an A/B job) and the A/B per-pair ratios when the
    /// worker sent them. A worker that timed out, crashed or exited is dropped.
    async fn run_job(&mut self, job: &WorkerJob) -> (RowOutcome, Option<PairRatios>) {
        let timeout = self.timeout;
        let w = match self.worker().await {
            Ok(w) => w,
            Err(why) => return (RowOutcome::NotRun(why), None),
        };
        let mut outcome = None;
        let mut ratios = None;
        let end = w
            .run(job, timeout, &mut |e| match e {
                WorkerEvent::Outcome {
                    outcome: o,
                    part: Part::A,
                } => outcome = Some(*o),
                WorkerEvent::Comparison { ratios: r } => ratios = Some(r),
                _ => {}
            })
            .await;
        let ended = match end {
            JobEnd::Done { exit: None } => None,
            JobEnd::Done { exit: Some(_) } => {
                w.wait_exit().await;
                Some(String::new())
            }
            JobEnd::TimedOut => {
                w.kill().await;
                Some(format!(
                    "timed out after {:.0} s: the worker was killed",
                    timeout.as_secs_f64()
                ))
            }
            JobEnd::Died => Some(format!("crashed: the worker {}", w.wait_exit().await)),
        };
        if ended.is_some() {
            *self.warm = None;
        }
        let outcome = match outcome {
            Some(Outcome::Measured { result, .. }) => RowOutcome::Measured(result),
            Some(Outcome::Fake { .. }) => RowOutcome::Fake,
            Some(Outcome::Error { error }) => RowOutcome::NotRun(format!("error: {error}")),
            None => RowOutcome::NotRun(ended.unwrap_or_else(|| "no result".into())),
        };
        (outcome, ratios)
    }

    /// Runs one job of one program.
    pub async fn run_one(&mut self, job: &WorkerJob) -> RowOutcome {
        self.run_job(job).await.0
    }

    /// Runs an A/B job (twice the time limit, as the service gives one) and returns its
    /// per-pair ratios (none when either side did not run).
    pub async fn compare(&mut self, job: &WorkerJob) -> Option<PairRatios> {
        let single = self.timeout;
        self.timeout = single * 2;
        let (_, ratios) = self.run_job(job).await;
        self.timeout = single;
        ratios
    }
}

/// A table cell: no pipes or line breaks, at most 160 characters.
fn cell(text: &str) -> String {
    let one_line: String = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|");
    if one_line.chars().count() > 160 {
        let cut: String = one_line.chars().take(157).collect();
        format!("{cut}...")
    } else {
        one_line
    }
}

/// The Markdown table; with the peers' columns when a run timed peers, and the clock's when a
/// run probed it.
pub fn render(rows: &[Row]) -> String {
    let mut s = String::new();
    let with_peers = rows
        .iter()
        .any(|r| matches!(&r.outcome, RowOutcome::Measured(m) if m.peers.is_some()));
    let with_clock = rows
        .iter()
        .any(|r| matches!(&r.outcome, RowOutcome::Measured(m) if m.clock.is_some()));
    // A column per peer any run timed, in the order they first appear.
    let mut names: Vec<&str> = Vec::new();
    for r in rows {
        if let RowOutcome::Measured(m) = &r.outcome {
            for q in m.peers.iter().flat_map(|p| &p.peers) {
                if !names.contains(&q.name.as_str()) {
                    names.push(&q.name);
                }
            }
        }
    }
    let peer_head = if with_peers {
        let cols: String = names.iter().map(|n| format!(" {n} (us) |")).collect();
        format!("{cols} hopfuse vs best peer |")
    } else {
        String::new()
    };
    let clock_head = if with_clock {
        " SM clock | per SM-cycle |"
    } else {
        ""
    };
    let _ = writeln!(
        s,
        "| example | size | time (us): median (min-max) | throughput | ceiling | ratio | validation |{clock_head}{peer_head}"
    );
    let columns = 7 + if with_clock { 2 } else { 0 } + if with_peers { names.len() + 1 } else { 0 };
    let _ = writeln!(s, "|{}", " --- |".repeat(columns));
    for r in rows {
        let (time, gbps, ceiling, ratio, validation) = match &r.outcome {
            RowOutcome::Measured(m) => {
                let t = &m.timing;
                let rel = m
                    .validation
                    .iter()
                    .chain(&m.validation_after_timing)
                    .map(|c| c.rel_l2)
                    .fold(0.0f64, f64::max);
                let (gbps, ceiling, ratio) = crate::report::throughput(m);
                (
                    format!("{:.2} ({:.2}-{:.2})", t.median_us, t.min_us, t.max_us),
                    gbps,
                    cell(&ceiling),
                    ratio,
                    format!(
                        "{} (rel_l2 {rel:.3e})",
                        if m.passed { "PASS" } else { "FAIL" }
                    ),
                )
            }
            RowOutcome::Fake => (
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "fake worker: compiled and checked, not run".into(),
            ),
            RowOutcome::NotRun(why) => ("-".into(), "-".into(), "-".into(), "-".into(), cell(why)),
        };
        let clock = match (&r.outcome, with_clock) {
            (_, false) => String::new(),
            (RowOutcome::Measured(m), true) => clock_cells(m.clock.as_ref()),
            (_, true) => " - | - |".into(),
        };
        let peers = match (&r.outcome, with_peers) {
            (_, false) => String::new(),
            (RowOutcome::Measured(m), true) => peer_cells(&names, m.peers.as_ref()),
            (_, true) => " - |".repeat(names.len() + 1),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {time} | {gbps} | {ceiling} | {ratio} | {validation} |{clock}{peers}",
            cell(&r.example),
            cell(&r.sizes)
        );
    }
    // The runs' warnings (a persistent grid that needs more than one wave), below the table.
    let warnings: Vec<String> = rows
        .iter()
        .filter_map(|r| match &r.outcome {
            RowOutcome::Measured(m) => Some((r, &m.warnings)),
            _ => None,
        })
        .flat_map(|(r, ws)| {
            ws.iter()
                .map(move |w| format!("- {} {}: {w}", r.example, r.sizes))
        })
        .collect();
    if !warnings.is_empty() {
        let _ = writeln!(s, "\nWarnings:\n{}", warnings.join("\n"));
    }
    s
}

/// The SM clock of the last timed launch, and a product's FLOP per SM-cycle (with its share of
/// the tensor cores' peak for 16-bit operands).
fn clock_cells(c: Option<&hopfuse_api::run::ClockReading>) -> String {
    let Some(c) = c else {
        return " - | - |".into();
    };
    let per_cycle = match (c.flop_per_sm_cycle, c.fraction_of_tensor_peak) {
        (Some(f), Some(p)) => format!("{f:.0} FLOP ({:.1}% of the tensor peak)", p * 100.0),
        (Some(f), None) => format!("{f:.1} FLOP"),
        (None, _) => "-".into(),
    };
    format!(" {:.0} MHz | {per_cycle} |", c.sm_clock_mhz)
}

/// One cell per peer (median (min-max), and FAIL when its output did not validate), then
/// hopfuse against the best one.
fn peer_cells(names: &[&str], p: Option<&crate::peers::PeersReport>) -> String {
    let mut s = String::new();
    for &name in names {
        let peer = p.and_then(|p| p.peers.iter().find(|q| q.name == name));
        let text = match peer {
            Some(q) => match (&q.timing, &q.error) {
                (Some(t), _) => format!(
                    "{:.2} ({:.2}-{:.2}){}",
                    t.median_us,
                    t.min_us,
                    t.max_us,
                    if q.passed { "" } else { " FAIL" }
                ),
                (None, e) => format!("not timed: {}", e.as_deref().unwrap_or("?")),
            },
            None => "-".into(),
        };
        let _ = write!(s, " {} |", cell(&text));
    }
    let vs = p.map(crate::report::speedup).unwrap_or_else(|| "-".into());
    let _ = write!(s, " {} |", cell(&vs));
    s
}

/// A line about the device and the ceiling, from the first measured row.
pub fn summary(rows: &[Row]) -> Option<String> {
    let m = rows.iter().find_map(|r| match &r.outcome {
        RowOutcome::Measured(m) => Some(m),
        _ => None,
    })?;
    let d = &m.device;
    let mut s = format!(
        "Device: {} ({} SMs), driver {}.{}.",
        d.name,
        d.sm_count,
        d.driver_version / 1000,
        d.driver_version % 1000 / 10
    );
    if let Some(c) = &m.copy {
        let when = match c.measured {
            crate::engine::CeilingWhen::WorkerStart => "once at worker start and reused",
            crate::engine::CeilingWhen::Run => "by the run",
        };
        let _ = write!(
            s,
            " Ceiling: device-to-device copy of {} (read + written), measured {when}.",
            crate::report::bytes(c.buffer_bytes)
        );
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_lines_give_the_sizes() {
        let src = "// a program\n// bench: M=16384,N=16384\nfusion f {}\n// bench: M=8, N=1_000\n";
        let s = bench_sizes(src).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(sizes::format_sizes(&s[0]), "M=16384,N=16384");
        assert_eq!(sizes::format_sizes(&s[1]), "M=8,N=1000");
        assert!(bench_sizes("fusion f {}").unwrap().is_empty());
        // An empty line: one run with no sizes (a constant fusion).
        let s = bench_sizes("// bench:\nfusion f {}").unwrap();
        assert_eq!(s.len(), 1);
        assert!(s[0].is_empty());
        let err = bench_sizes("x\n// bench: M=lots").unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
    }

    #[test]
    fn names_and_cells() {
        assert_eq!(
            example_name(Path::new("examples/basics/add.hf")),
            "basics/add"
        );
        assert_eq!(example_name(Path::new("/tmp/x.hf")), "/tmp/x");
        assert_eq!(cell("a | b\n  c"), "a \\| b c");
        assert_eq!(cell(&"x".repeat(300)).len(), 160);
    }

    #[test]
    fn the_table_has_a_row_per_run() {
        let rows = vec![
            row("basics/add", "M=1,N=2", RowOutcome::Fake),
            row(
                "basics/bad",
                "",
                RowOutcome::NotRun("error: CUDA: boom".into()),
            ),
        ];
        let t = render(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(lines[0].starts_with("| example | size | time"));
        assert!(lines[3].contains("error: CUDA: boom"), "{t}");
        assert!(!rows[1].ok() && rows[0].ok());
        assert!(summary(&rows).is_none());
    }

    #[test]
    fn runs_with_a_clock_get_its_columns() {
        // The service's done event with a clock reading (runner/tests/api_fixtures.rs).
        let event: serde_json::Value =
            serde_json::from_str(include_str!("../../web/tests/fixtures/done-clock.json")).unwrap();
        let result: RunResult = serde_json::from_value(event["result"]["result"].clone()).unwrap();
        let mut tensor = result.clone();
        if let Some(c) = tensor.clock.as_mut() {
            c.flop_per_sm_cycle = Some(3603.6);
            c.fraction_of_tensor_peak = Some(3603.6 / 4096.0);
        }
        let rows = vec![
            row(
                "basics/matmul",
                "M=2048",
                RowOutcome::Measured(Box::new(result)),
            ),
            row(
                "matmul/step15",
                "M=4096",
                RowOutcome::Measured(Box::new(tensor)),
            ),
            row("basics/bad", "", RowOutcome::NotRun("error: boom".into())),
        ];
        let t = render(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].ends_with("| validation | SM clock | per SM-cycle |"),
            "{t}"
        );
        assert_eq!(lines[1].matches("---").count(), 9, "{t}");
        assert!(lines[2].ends_with("| 1675 MHz | 38.9 FLOP |"), "{t}");
        assert!(
            lines[3].ends_with("| 1675 MHz | 3604 FLOP (88.0% of the tensor peak) |"),
            "{t}"
        );
        assert!(lines[4].ends_with("| error: boom | - | - |"), "{t}");
    }

    #[test]
    fn runs_with_peers_get_their_columns() {
        // The service's done event with peers (runner/tests/api_fixtures.rs writes it).
        let event: serde_json::Value =
            serde_json::from_str(include_str!("../../web/tests/fixtures/done-peers.json")).unwrap();
        let result: RunResult = serde_json::from_value(event["result"]["result"].clone()).unwrap();
        let rows = vec![
            row(
                "basics/add",
                "M=1000,N=1024",
                RowOutcome::Measured(Box::new(result)),
            ),
            row("basics/bad", "", RowOutcome::NotRun("error: boom".into())),
        ];
        let t = render(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].ends_with(
                "| validation | eager (us) | torch.compile (us) | hopfuse vs best peer |"
            ),
            "{t}"
        );
        assert_eq!(lines[1].matches("---").count(), 10, "{t}");
        assert!(
            lines[2].ends_with(
                "| 4.00 (3.75-4.50) | 3.25 (3.00-3.75) | x1.30 vs torch.compile (x1.25..x1.34 per round) |"
            ),
            "{t}"
        );
        assert!(lines[3].ends_with("| error: boom | - | - | - |"), "{t}");
        assert_eq!(lines.len(), 4, "no warnings: nothing below the table\n{t}");
    }

    /// A run's warnings are listed below the table, with the run they belong to.
    #[test]
    fn warnings_follow_the_table() {
        let event: serde_json::Value =
            serde_json::from_str(include_str!("../../web/tests/fixtures/done-passed.json"))
                .unwrap();
        let mut result: RunResult =
            serde_json::from_value(event["result"]["result"].clone()).unwrap();
        result.warnings = vec!["persistent grid of 32 clusters of 4 CTAs, but ...".into()];
        let rows = vec![
            row(
                "matmul/step12",
                "M=4096",
                RowOutcome::Measured(Box::new(result)),
            ),
            row("basics/add", "M=1,N=2", RowOutcome::Fake),
        ];
        let t = render(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[4..],
            [
                "",
                "Warnings:",
                "- matmul/step12 M=4096: persistent grid of 32 clusters of 4 CTAs, but ..."
            ],
            "{t}"
        );
    }
}
