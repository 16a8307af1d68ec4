//! `hopfuse`: compile, check and run hopfuse programs.

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use hopfuse::{CompileOptions, IndexType};
use hopfuse_runner::documents::{self, DocumentsArg};
use hopfuse_runner::engine::{self, RunRequest};
use hopfuse_runner::profile::ProfileReport;
use hopfuse_runner::{nvrtc, report, selftest, sizes};
use std::collections::BTreeMap;
use std::io::Write;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "hopfuse",
    version,
    about = "A lowering compiler for NVIDIA Hopper fusion kernels"
)]
struct Cli {
    /// More logging (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Index {
    I32,
    I64,
}

impl From<Index> for IndexType {
    fn from(i: Index) -> IndexType {
        match i {
            Index::I32 => IndexType::I32,
            Index::I64 => IndexType::I64,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Write a kernel out for use without hopfuse: its CUDA and CUBIN (NVRTC, sm_90a), a C++
    /// launcher on the CUDA driver API with a program that runs it, a Python launcher on torch
    /// tensors, the fusion in PyTorch, the plan and a README (no GPU needed).
    Export {
        file: PathBuf,
        /// Size symbols the kernel is specialised for, e.g. M=4096,N=4096 (may be repeated;
        /// not needed when every extent is a constant).
        #[arg(long, short = 's')]
        size: Vec<String>,
        /// Directory to write the files to (created if missing).
        #[arg(long)]
        out: PathBuf,
        /// Index type [default: the one the sizes need].
        #[arg(long, value_enum)]
        index: Option<Index>,
        /// Compile the kernel generic over its sizes (read from its size parameters at run
        /// time) instead of specialised to them (constants; the plan refuses other sizes).
        #[arg(long)]
        generic: bool,
    },
    /// Print the CUDA a program compiles to (no GPU needed).
    ///
    /// With --passes, --plan, --ptx and/or --sass, print those instead (add --cuda to print the
    /// CUDA as well).
    Compile {
        file: PathBuf,
        /// Print the kernel IR after each pass.
        #[arg(long)]
        passes: bool,
        /// Print the launch plan as JSON.
        #[arg(long)]
        plan: bool,
        /// Print the PTX (NVRTC), each run of lines headed by its CUDA line and IR statement.
        #[arg(long)]
        ptx: bool,
        /// Print the SASS (NVRTC + nvdisasm), headed by ptxas's resource usage, each run of
        /// lines headed by its CUDA line, IR statement and the pass that made it.
        #[arg(long)]
        sass: bool,
        /// The variant a run with these sizes builds (specialised to them unless --generic,
        /// aligned vectors, the automatic schedule of a program without one; with --ptx/--sass
        /// the index type too), e.g. M=4096,N=4096.
        #[arg(long, short = 's')]
        size: Vec<String>,
        /// With --size: the kernel generic over its sizes, as `run --generic` builds it.
        #[arg(long, requires = "size")]
        generic: bool,
        /// Print the CUDA too when --passes, --plan, --ptx or --sass is given.
        #[arg(long)]
        cuda: bool,
        /// Index type of the generated code [default: i64, or as a run picks with --size].
        #[arg(long, value_enum)]
        index: Option<Index>,
        /// Values of scalar inputs, e.g. eps=1e-6 (may be repeated): the launch plan's (--plan)
        /// values in place of the program's `= value`.
        #[arg(long)]
        scalar: Vec<String>,
        /// Print the PyTorch twin of the fusion instead (a Python function computing the same
        /// with the same dtypes and accumulation types; the schedule is not needed).
        #[arg(long, conflicts_with_all = ["passes", "plan", "cuda", "ptx", "sass"])]
        torch: bool,
    },
    /// Print the schedule the automatic schedulers write for a program (what it compiles with
    /// when it has no `schedule { }` block of its own): the scheduler and why on two comment
    /// lines, then the schedule block, ready to paste under the fusion.
    ///
    /// Sizes: --size, else the program's first `// bench:` line, else defaults.
    Schedule {
        file: PathBuf,
        /// Size symbols to decide for, e.g. M=4096,N=4096 (may be repeated).
        #[arg(long, short = 's')]
        size: Vec<String>,
    },
    /// Compile programs with hopfuse, then with NVRTC to a CUBIN for sm_90a (no GPU needed).
    ///
    /// Fails on any NVRTC error or warning. Checks both index types unless --index is given.
    NvrtcCheck {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[arg(long, value_enum)]
        index: Option<Index>,
        /// The files are CUDA C++, not hopfuse programs.
        #[arg(long)]
        cuda: bool,
        /// Also build each program's PTX and SASS (nvdisasm) and check their line info: every
        /// instruction tied to a CUDA line of the kernel, and the kernel-IR statements reached.
        #[arg(long, conflicts_with = "cuda")]
        inspect: bool,
    },
    /// Compile, launch, validate and time a program on the GPU.
    Run(RunArgs),
    /// Check the runner itself on built-in kernels with known answers (needs a GPU).
    Selftest {
        #[arg(long, default_value_t = 20)]
        iters: u32,
        #[arg(long, default_value_t = 3)]
        warmup: u32,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Skip the ceilings (device-to-device copy; cuBLAS for a matrix product).
        #[arg(long)]
        no_ceiling: bool,
    },
    /// Run every example (or the given programs) on the GPU; print a Markdown table.
    ///
    /// Sizes: --size for every program, else each program's `// bench: M=...,N=...` lines
    /// (one row each). Runs go through one warm worker process (docs/api.md, Isolation).
    Bench(BenchArgs),
    /// Search the automatic scheduler's parameters for a program and sizes on the GPU: compile
    /// each candidate schedule on every core, validate and time each (as bench does) within a
    /// time budget, time the winner against the default again interleaved, and print the table
    /// and the winner's schedule (its own schedule, if the program has one, is set aside).
    Tune(TuneArgs),
    /// Serve the playground and the HTTP API (docs/api.md); runs go to `hopfuse worker`s.
    Serve(Box<hopfuse_runner::serve::ServeArgs>),
    /// A GPU host of the distributed mode: run jobs from NATS JetStream (`hopfuse serve
    /// --queue`) on this host's GPUs (docs/deploy.md).
    Agent(Box<hopfuse_runner::distributed::agent::AgentArgs>),
    /// Run one job: job JSON on stdin, events and the result as JSON lines on stdout (used by
    /// `hopfuse serve`).
    #[command(hide = true)]
    Worker(WorkerArgs),
}

#[derive(Args)]
struct WorkerArgs {
    /// Compile and check only; run and measure nothing (CI without a GPU).
    #[arg(long)]
    fake: bool,
    /// Test hook of the fake worker.
    #[arg(long, value_enum, default_value = "ok", requires = "fake")]
    fake_behaviour: hopfuse_runner::worker::FakeBehaviour,
    /// Print the GPU (or why there is none) as JSON and exit.
    #[arg(long, conflicts_with_all = ["fake", "serve"])]
    probe: bool,
    /// Stay warm: open the GPU and measure the copy ceiling once, then run one job per stdin
    /// line (each ended by a `job_end` event) until stdin closes or a CUDA error.
    #[arg(long)]
    serve: bool,
    /// Compile one CUDA source to PTX and SASS for `POST /api/inspect` (job JSON on stdin, the
    /// answer as one JSON line on stdout; no GPU).
    #[arg(long, conflicts_with_all = ["fake", "serve", "probe"])]
    inspect: bool,
}

#[derive(Args)]
struct BenchArgs {
    /// Programs [default: examples/*/*.hf below the current directory].
    files: Vec<PathBuf>,
    /// Sizes for every program, e.g. M=4096,N=4096 (may be repeated) [default: each
    /// program's `// bench:` lines].
    #[arg(long, short = 's')]
    size: Vec<String>,
    #[command(flatten)]
    runs: WarmRunArgs,
    /// Always run NVRTC.
    #[arg(long)]
    no_cubin_cache: bool,
    /// Also time each program's torch twin eagerly and under torch.compile, interleaved with
    /// the kernel: the table gets their columns. Raises --job-timeout to at least 900 s
    /// (torch.compile compiles and autotunes inside the run).
    #[arg(long)]
    peers: bool,
    /// Probe each kernel's SM clock (as `hopfuse run --clock`): the table gets the clock of each
    /// run's last timed launch and a product's FLOP per SM-cycle.
    #[arg(long)]
    clock: bool,
    /// Compile each kernel generic over its sizes instead of specialised to each row's sizes
    /// (as `run --generic`), to compare the two.
    #[arg(long)]
    generic: bool,
}

#[derive(Args)]
struct TuneArgs {
    file: PathBuf,
    /// Size symbols to tune for, e.g. M=8192,N=16384 (may be repeated) [default: the program's
    /// first `// bench:` line].
    #[arg(long, short = 's')]
    size: Vec<String>,
    /// Seconds for the whole search; candidates not reached by then are listed as such.
    #[arg(long, default_value_t = 60.0)]
    budget: f64,
    /// Write the program with the winner's schedule to this file.
    #[arg(long)]
    write: Option<PathBuf>,
    #[command(flatten)]
    runs: WarmRunArgs,
}

/// The run options `bench` and `tune` share: each run's (each candidate's) launches, seed and
/// packed-document inputs, its time limit, the CUBIN cache's directory and the fake worker.
#[derive(Args)]
struct WarmRunArgs {
    #[arg(long, default_value_t = 100)]
    iters: u32,
    #[arg(long, default_value_t = 10)]
    warmup: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    documents: DocumentsArgs,
    /// Seconds one run may take before its worker is killed. (Longer than the service's: a
    /// run includes its float64 reference, which for a fused epilogue at 8192^3 runs on the
    /// host and takes about a minute.)
    #[arg(long, default_value_t = 180.0)]
    job_timeout: f64,
    /// Directory of the CUBIN cache (`cubin/`) [default: as `hopfuse serve`].
    #[arg(long, env = "HOPFUSE_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Use the fake worker (compile and check only; tests without a GPU).
    #[arg(long, hide = true)]
    fake_worker: bool,
}

impl WarmRunArgs {
    /// The time limit of one run, checked.
    fn timeout(&self) -> Result<std::time::Duration> {
        if !(self.job_timeout.is_finite() && self.job_timeout > 0.0) {
            bail!("--job-timeout must be a positive number of seconds");
        }
        Ok(std::time::Duration::from_secs_f64(self.job_timeout))
    }

    fn data_dir(&self) -> PathBuf {
        self.data_dir
            .clone()
            .unwrap_or_else(hopfuse_runner::serve::default_data_dir)
    }
}

/// `--documents`, as `run`, `bench` and `tune` take it.
#[derive(Args)]
struct DocumentsArgs {
    /// Fill integer inputs with packed-document ids instead of seeded values, e.g.
    /// doc_q,doc_k:512 (may be repeated): along each named input's last axis, for each index of
    /// its leading axes, ids 0,0,..,1,1,.. in documents of lengths uniform in [1, 2L-1] (mean
    /// L); inputs given the same L share their documents position by position.
    #[arg(
        long,
        value_name = "NAME[,NAME...]:L",
        value_parser = documents::parse_documents
    )]
    documents: Vec<DocumentsArg>,
}

impl DocumentsArgs {
    /// The request's `documents`; an input named twice is an error.
    fn by_name(&self) -> Result<BTreeMap<String, NonZeroU32>> {
        documents::merge_documents(&self.documents).map_err(anyhow::Error::msg)
    }
}

#[derive(Args)]
struct RunArgs {
    file: PathBuf,
    /// Size symbols, e.g. M=4096,N=4096 (may be repeated; not needed when every extent is a
    /// constant).
    #[arg(long, short = 's')]
    size: Vec<String>,
    /// Values of scalar inputs, e.g. eps=1e-6,scale=0.125 (may be repeated): in place of the
    /// program's `= value`, or of the value drawn from the seed for a scalar without one.
    #[arg(long)]
    scalar: Vec<String>,
    /// Timed launches.
    #[arg(long, default_value_t = 100)]
    iters: u32,
    /// Untimed launches before the timed ones.
    #[arg(long, default_value_t = 10)]
    warmup: u32,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    documents: DocumentsArgs,
    /// Index type (default: i32 when every tensor has fewer than 2^31 elements, else i64).
    #[arg(long, value_enum)]
    index: Option<Index>,
    /// Skip the ceilings: device-to-device copy, and cuBLAS for a matrix product (e.g. under compute-sanitizer).
    #[arg(long)]
    no_ceiling: bool,
    /// Print the result as JSON instead of the report.
    #[arg(long)]
    json: bool,
    /// Also write the result (or `{"error": ...}`) as JSON to this file.
    #[arg(long, value_name = "PATH")]
    json_file: Option<PathBuf>,
    /// After the run, profile the kernel with Nsight Compute (ncu, on the GPU host): DRAM
    /// throughput, L2 hit rate, SM and tensor-pipe utilisation, achieved occupancy, top warp
    /// stalls, shared-memory bank conflicts (a `profile` field in the JSON).
    #[arg(long)]
    profile: bool,
    /// With --profile: write the roofline (achieved against the measured copy and, for a
    /// matrix product, cuBLAS ceilings) as SVG to this file.
    #[arg(long, value_name = "PATH", requires = "profile")]
    roofline: Option<PathBuf>,
    /// With --profile: seconds ncu may take (killed past it).
    #[arg(long, default_value_t = hopfuse_runner::profile::DEFAULT_TIME_LIMIT_S, requires = "profile")]
    profile_timeout: f64,
    /// With --profile: also write ncu's raw page (CSV) to this file (a test fixture).
    #[arg(long, value_name = "PATH", requires = "profile")]
    profile_csv: Option<PathBuf>,
    /// Also time the fusion's torch twin eagerly and under torch.compile, interleaved with the
    /// kernel (needs torch in `$HOPFUSE_PYTHON`, default python3; else says why not).
    #[arg(long)]
    peers: bool,
    /// Compile the kernel with a clock probe and report the SM clock it ran at: thread 0 of each
    /// CTA records %clock64 and %globaltimer at entry and exit (a `clock` field in the JSON; for
    /// a matrix product, also its FLOP per SM-cycle against the tensor cores' peak).
    #[arg(long)]
    clock: bool,
    /// Compile the kernel generic over its sizes (read from its size parameters at run time)
    /// instead of specialised to them (the size symbols constants), to compare the two.
    #[arg(long)]
    generic: bool,
    /// Launch this CUDA in place of the generated kernel: a hand edit of what `hopfuse compile
    /// --cuda` prints for the same --size, --index and --generic. It runs with the program's
    /// launch plan and inputs, and is validated against its float64 reference and timed as the
    /// generated kernel would be.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["profile", "clock"])]
    cuda_file: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!("hopfuse_runner={level},hopfuse={level}"))
    });
    // Colours only on a terminal: stderr redirected to a log file gets plain text.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match dispatch(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(command: Command) -> Result<ExitCode> {
    match command {
        Command::Compile {
            file, torch: true, ..
        } => torch_twin(&file),
        Command::Compile {
            file,
            passes,
            plan,
            ptx,
            sass,
            size,
            generic,
            cuda,
            index,
            scalar,
            ..
        } => {
            let scalars = parse_scalar_args(&scalar)?;
            if (ptx || sass) && !scalars.is_empty() {
                anyhow::bail!("--scalar sets the launch plan's values (--plan); PTX and SASS do not depend on them");
            }
            if ptx || sass {
                inspect(
                    &file,
                    ptx,
                    sass,
                    &size,
                    generic,
                    index.map(Into::into),
                    cuda,
                )
            } else {
                let sizes = (!size.is_empty())
                    .then(|| parse_size_args(&size))
                    .transpose()?;
                let options = CompileOptions {
                    index_type: index.map(Into::into).unwrap_or_default(),
                    // What a run with these sizes builds: specialised to them unless --generic.
                    specialize: !generic && sizes.is_some(),
                    aligned_for: sizes,
                    ..CompileOptions::default()
                };
                compile(&file, passes, plan, cuda, &options, &scalars)
            }
        }
        Command::Export {
            file,
            size,
            out,
            index,
            generic,
        } => export(&file, &size, &out, index.map(Into::into), !generic),
        Command::Schedule { file, size } => schedule(&file, &size),
        Command::NvrtcCheck {
            files,
            index,
            cuda,
            inspect,
        } => nvrtc_check(&files, index.map(Into::into), cuda, inspect),
        Command::Run(args) => run(args),
        Command::Selftest {
            iters,
            warmup,
            seed,
            no_ceiling,
        } => self_test(iters, warmup, seed, !no_ceiling),
        Command::Bench(args) => bench(args),
        Command::Tune(args) => tune(args),
        Command::Serve(args) => hopfuse_runner::serve::main(*args).map(|()| ExitCode::SUCCESS),
        Command::Agent(args) => {
            hopfuse_runner::distributed::agent::main(*args).map(|()| ExitCode::SUCCESS)
        }
        Command::Worker(args) => Ok(worker(args)),
    }
}

fn worker(args: WorkerArgs) -> ExitCode {
    use hopfuse_runner::worker;
    let code = if args.probe {
        worker::probe()
    } else if args.inspect {
        hopfuse_runner::inspect::worker_main()
    } else {
        worker::main(&worker::WorkerOptions {
            fake: args.fake,
            behaviour: args.fake_behaviour,
            serve: args.serve,
        })
    };
    ExitCode::from(code as u8)
}

/// This binary as the warm worker of `bench` and `tune` (the fake one: compile and check only).
fn warm_worker(fake: bool) -> Result<hopfuse_runner::warm::WorkerCommand> {
    Ok(hopfuse_runner::warm::WorkerCommand {
        exe: std::env::current_exe()?,
        args: if fake { vec!["--fake".into()] } else { vec![] },
        env: vec![],
        startup_timeout: std::time::Duration::from_secs(60),
    })
}

fn tune(args: TuneArgs) -> Result<ExitCode> {
    use hopfuse_runner::{bench, tune};
    let timeout = args.runs.timeout()?;
    if !(args.budget.is_finite() && args.budget > 0.0) {
        bail!("--budget must be a positive number of seconds");
    }
    let source = read(&args.file)?;
    let sizes = if args.size.is_empty() {
        match bench::bench_sizes(&source)
            .map_err(|e| anyhow::anyhow!("{}: bad `// bench:` {e}", args.file.display()))?
            .into_iter()
            .next()
        {
            Some(sizes) => sizes,
            None => bail!(
                "{}: no sizes to tune for: give --size or a `// bench:` line",
                args.file.display()
            ),
        }
    } else {
        parse_size_args(&args.size)?
    };
    let options = tune::TuneOptions {
        file: args.file.display().to_string(),
        source,
        sizes,
        budget: std::time::Duration::from_secs_f64(args.budget),
        iters: args.runs.iters,
        warmup: args.runs.warmup,
        seed: args.runs.seed,
        documents: args.runs.documents.by_name()?,
        cubin_cache: Some(args.runs.data_dir().join("cubin")),
    };
    // Every candidate reads the same inputs: a documents entry the program cannot take is told
    // once, not as every candidate's failure.
    hopfuse_runner::data::InputFills::resolve(&options.source, &options.sizes, &options.documents)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?;
    let command = warm_worker(args.runs.fake_worker)?;
    let report = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let mut warm = None;
            let mut runs = bench::WarmRuns {
                command: &command,
                timeout,
                warm: &mut warm,
            };
            eprintln!("tune: compiling the candidates on the host");
            let never = std::sync::atomic::AtomicBool::new(false);
            let report = tune::run(&options, &mut runs, &never, &mut |p| {
                eprintln!("{}", tune::describe(&p))
            })
            .await;
            if let Some(mut w) = warm {
                w.kill().await;
            }
            report
        });
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    if let Some(line) = documents::inputs_line(&options.documents) {
        println!("{line}\n");
    }
    print!("{}", tune::render(&report));
    match report.winner {
        Some(w) => {
            let t = &report.trials[w];
            print!(
                "\n// scheduler: {}\n// {}\n{}",
                t.schedule.scheduler.name(),
                t.schedule.reason,
                t.schedule.block()
            );
            if let Some(path) = &args.write {
                let program = report.winning_program().expect("a winner");
                std::fs::write(path, program)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                eprintln!("tune: wrote {}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        // The fake worker times nothing: every candidate compiled and checked is a success.
        None if report.checked_by_fake_worker() => Ok(ExitCode::SUCCESS),
        None => Ok(ExitCode::FAILURE),
    }
}

fn bench(args: BenchArgs) -> Result<ExitCode> {
    use hopfuse_runner::bench;
    let timeout = args.runs.timeout()?;
    let files = if args.files.is_empty() {
        let root = Path::new("examples");
        let files = bench::example_files(root)
            .with_context(|| "no programs given and no ./examples directory to take them from")?;
        if files.is_empty() {
            bail!("no programs given and no examples/*/*.hf files");
        }
        files
    } else {
        args.files
    };
    let sizes = if args.size.is_empty() {
        None
    } else {
        Some(parse_size_args(&args.size)?)
    };
    let data_dir = args.runs.data_dir();
    let options = bench::BenchOptions {
        files,
        sizes,
        iters: args.runs.iters,
        warmup: args.runs.warmup,
        seed: args.runs.seed,
        documents: args.runs.documents.by_name()?,
        timeout: if args.peers {
            timeout.max(std::time::Duration::from_secs(900))
        } else {
            timeout
        },
        worker: warm_worker(args.runs.fake_worker)?,
        cubin_cache: (!args.no_cubin_cache).then(|| data_dir.join("cubin")),
        peers: args.peers,
        clock: args.clock,
        generic: args.generic,
    };
    let rows = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(bench::run(&options, &mut |row| {
            eprintln!("bench: {} {} done", row.example, row.sizes);
        }));
    if let Some(line) = bench::summary(&rows) {
        println!("{line}\n");
    }
    if let Some(line) = documents::inputs_line(&options.documents) {
        println!("{line}\n");
    }
    print!("{}", bench::render(&rows));
    Ok(if rows.iter().all(|r| r.ok()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn read(file: &Path) -> Result<String> {
    std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))
}

fn compile(
    file: &Path,
    passes: bool,
    plan: bool,
    cuda: bool,
    options: &CompileOptions,
    scalars: &BTreeMap<String, f64>,
) -> Result<ExitCode> {
    let source = read(file)?;
    let name = file.display().to_string();
    let compiled = match hopfuse::compile_program(&source, options) {
        Ok(c) => c,
        Err(d) => {
            eprintln!("{}", d.render(&source, &name));
            return Ok(ExitCode::FAILURE);
        }
    };
    let mut out = std::io::stdout().lock();
    match compiled {
        hopfuse::Compiled::One {
            mut compilation,
            not_segmented,
        } => {
            hopfuse_runner::scalars::apply(&mut compilation.plan, scalars)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            note_compiled(&name, &compilation);
            if let Some(why) = not_segmented {
                eprintln!("note: {name} was not split into several kernels either: {why}");
            }
            print_compilation(&mut out, &compilation, passes, plan, cuda)?;
        }
        hopfuse::Compiled::Segmented(mut segmented) => {
            let count = segmented.kernels.len();
            eprintln!(
                "note: no scheduler takes {name} whole ({}); split into {count} kernels",
                segmented.segmentation.reason
            );
            // A scalar may be read by a later kernel only: checked against all of them.
            let plans: Vec<_> = segmented.kernels.iter().map(|k| k.plan.clone()).collect();
            let values = hopfuse_runner::scalars::resolve_all(&plans, scalars)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            for (kernel, segment) in segmented
                .kernels
                .iter_mut()
                .zip(&mut segmented.plan.kernels)
            {
                hopfuse_runner::scalars::set_values(&mut kernel.plan, &values);
                segment.plan = kernel.plan.clone();
            }
            if plan {
                writeln!(out, "{}", serde_json::to_string_pretty(&segmented.plan)?)?;
            }
            if passes || cuda || !plan {
                for (k, (kernel, segment)) in segmented
                    .kernels
                    .iter()
                    .zip(&segmented.segmentation.segments)
                    .enumerate()
                {
                    writeln!(
                        out,
                        "// ==== segment {} of {count}: {} ({}; reads {}; writes {}): {}",
                        k + 1,
                        kernel.plan.kernel_name,
                        segment.scheduler,
                        segment.reads.join(", "),
                        segment.writes.join(", "),
                        segment.reason
                    )?;
                    note_compiled(&segment.name, kernel);
                    print_compilation(&mut out, kernel, passes, false, cuda)?;
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The notes on stderr of one compiled kernel: its automatic schedule and its sizes.
fn note_compiled(name: &str, compilation: &hopfuse::Compilation) {
    if let Some(note) = &compilation.plan.auto_schedule {
        // The program has no schedule: say which one it got (stdout stays the CUDA alone).
        eprintln!(
            "note: no schedule in {name}: {} ({})",
            note.scheduler.as_deref().map_or_else(
                || "the serial default".to_string(),
                |s| format!("the automatic {s} schedule")
            ),
            note.reason
        );
    }
    if let Some(sizes) = compilation.plan.specialized_sizes() {
        let sizes: Vec<String> = sizes.iter().map(|(k, v)| format!("{k}={v}")).collect();
        eprintln!(
            "note: specialised to {} (--generic: the kernel generic over its sizes)",
            sizes.join(",")
        );
    }
}

/// One kernel's pass dumps, plan and CUDA as `hopfuse compile` prints them.
fn print_compilation(
    out: &mut impl Write,
    compilation: &hopfuse::Compilation,
    passes: bool,
    plan: bool,
    cuda: bool,
) -> Result<()> {
    if passes {
        for p in &compilation.passes {
            writeln!(out, "// ---- pass {}: {}", p.name, p.summary)?;
            writeln!(out, "{}", p.ir.trim_end())?;
        }
    }
    if plan {
        writeln!(out, "{}", serde_json::to_string_pretty(&compilation.plan)?)?;
    }
    if cuda || !(passes || plan) {
        write!(out, "{}", compilation.cuda)?;
        if !compilation.cuda.ends_with('\n') {
            writeln!(out)?;
        }
    }
    Ok(())
}

/// `hopfuse schedule`: the automatic schedule of a program, or why there is none (exit 1).
fn schedule(file: &Path, size: &[String]) -> Result<ExitCode> {
    let source = read(file)?;
    let sizes = parse_size_args(size)?;
    let render = |d: hopfuse::Diagnostics| d.render(&source, &file.display().to_string());
    let chosen = match hopfuse::auto_schedule(&source, Some(&sizes)) {
        Ok(chosen) => chosen,
        Err(d) => {
            eprintln!("{}", render(d));
            return Ok(ExitCode::FAILURE);
        }
    };
    match chosen {
        Ok(auto) => {
            if hopfuse::frontend::parse(&source).is_ok_and(|p| !p.schedule.is_empty()) {
                eprintln!(
                    "note: {} has a schedule of its own, which it compiles with; this is the automatic one",
                    file.display()
                );
            }
            print!(
                "// scheduler: {}\n// {}\n{}",
                auto.scheduler.name(),
                auto.reason,
                auto.block()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(declined) => {
            let given = (!sizes.is_empty()).then_some(&sizes);
            match hopfuse::segment::decide(&source, given) {
                Ok(hopfuse::segment::Decision::Split(split)) => {
                    print_segment_schedules(&split, given);
                    Ok(ExitCode::SUCCESS)
                }
                Ok(hopfuse::segment::Decision::Declined(why)) => {
                    eprintln!(
                        "no automatic schedule: {}\nnot split into kernels either: {}",
                        declined.reason, why.0
                    );
                    Ok(ExitCode::FAILURE)
                }
                Ok(hopfuse::segment::Decision::Whole) => {
                    eprintln!("no automatic schedule: {}", declined.reason);
                    Ok(ExitCode::FAILURE)
                }
                Err(d) => {
                    eprintln!("{}", render(d));
                    Ok(ExitCode::FAILURE)
                }
            }
        }
    }
}

/// Each segment's program and automatic schedule, as `hopfuse schedule` prints a split fusion:
/// a header per segment, its fusion, then its schedule as a block (each segment a program).
fn print_segment_schedules(
    split: &hopfuse::segment::Segmentation,
    sizes: Option<&BTreeMap<String, i64>>,
) {
    println!(
        "// no scheduler takes the fusion whole ({}); it is split into {} kernels",
        split.reason,
        split.segments.len()
    );
    for (k, segment) in split.segments.iter().enumerate() {
        println!(
            "\n// ==== segment {} of {}: {} ({}): {}",
            k + 1,
            split.segments.len(),
            segment.name,
            segment.scheduler,
            segment.reason
        );
        let fusion_text = segment
            .source
            .lines()
            .filter(|l| !l.starts_with(hopfuse::auto::BENCH_PREFIX))
            .collect::<Vec<_>>()
            .join("\n");
        println!("{fusion_text}");
        match hopfuse::auto_schedule(&segment.source, sizes) {
            Ok(Ok(auto)) => print!("// {}\n{}", auto.reason, auto.block()),
            Ok(Err(declined)) => println!("// no automatic schedule: {}", declined.reason),
            Err(d) => println!("// {}", d.render(&segment.source, &segment.name)),
        }
    }
}

/// `hopfuse compile --ptx/--sass`: the listings mapped to CUDA lines, IR and passes.
fn inspect(
    file: &Path,
    ptx: bool,
    sass: bool,
    size: &[String],
    generic: bool,
    index: Option<IndexType>,
    cuda: bool,
) -> Result<ExitCode> {
    use hopfuse_runner::inspect::{self, InspectRequest};
    let req = InspectRequest {
        file: file.display().to_string(),
        source: read(file)?,
        sizes: parse_size_args(size)?,
        index,
        generic,
    };
    let ins = match inspect::inspect(&req, None) {
        Ok(ins) => ins,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let mut out = std::io::stdout().lock();
    if cuda {
        write!(out, "{}", ins.cuda)?;
    }
    writeln!(out, "{}", inspect::resource_line(&ins))?;
    writeln!(
        out,
        "// {} index, {}: {}",
        ins.variant.index_type.cuda(),
        if ins.variant.assume_aligned_vectors {
            "aligned vectors"
        } else {
            "vector alignment checked at run time"
        },
        ins.variant.reason
    )?;
    for w in &ins.warnings {
        writeln!(out, "// warning: {}", w.text)?;
    }
    if ptx {
        write!(out, "{}", inspect::annotate(&ins, &ins.ptx))?;
    }
    if sass {
        match &ins.sass {
            Some(listing) => write!(out, "{}", inspect::annotate(&ins, listing))?,
            None => {
                eprintln!(
                    "no SASS: {}",
                    ins.sass_unavailable.as_deref().unwrap_or("unknown reason")
                );
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn torch_twin(file: &Path) -> Result<ExitCode> {
    let source = read(file)?;
    match hopfuse::torch_twin(&source) {
        Ok(twin) => {
            print!("{}", twin.source);
            Ok(ExitCode::SUCCESS)
        }
        Err(d) => {
            eprintln!("{}", d.render(&source, &file.display().to_string()));
            Ok(ExitCode::FAILURE)
        }
    }
}

fn export(
    file: &Path,
    size: &[String],
    out: &Path,
    index: Option<IndexType>,
    specialize: bool,
) -> Result<ExitCode> {
    use hopfuse_launch::specialize::{compile_for_sizes, compile_segments_for_sizes, PrepareError};
    let source = read(file)?;
    let sizes = parse_size_args(size)?;
    let name = file.display().to_string();
    let twin =
        hopfuse::torch_twin(&source).map_err(|d| anyhow::anyhow!("{}", d.render(&source, &name)));
    // A fusion no scheduler takes whole: every kernel and a launcher that runs them in order.
    if let Ok(hopfuse::segment::Decision::Split(split)) =
        hopfuse::segment::decide(&source, Some(&sizes))
    {
        let kernels = compile_segments_for_sizes(&split, &sizes, index, specialize)
            .map_err(|e| anyhow::anyhow!("{name}: {}", e.describe(&split)))?;
        let cubins = kernels
            .iter()
            .map(|k| {
                nvrtc::compile(&k.compilation.cuda, &k.compilation.plan.kernel_name)
                    .map(|c| c.image)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let fusion = hopfuse::reference_fusion(&source)
            .map_err(|d| anyhow::anyhow!("{}", d.render(&source, &name)))?;
        let files = hopfuse_launch::export::export_split(
            &split, &kernels, &cubins, &fusion, &sizes, &twin?, &name,
        )
        .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        return write_export(out, &files);
    }
    let (compilation, setup) = match compile_for_sizes(&source, &sizes, index, specialize, false) {
        Ok(c) => c,
        Err(PrepareError::Compile(d)) => {
            eprintln!("{}", d.render(&source, &name));
            return Ok(ExitCode::FAILURE);
        }
        Err(PrepareError::Sizes(e)) => bail!("{name}: {e}"),
    };
    let cubin = nvrtc::compile(&compilation.cuda, &compilation.plan.kernel_name)?;
    let files =
        hopfuse_launch::export::export(&compilation, &setup, &sizes, &cubin.image, &twin?, &name)
            .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    write_export(out, &files)
}

/// Writes an export's files into `out` (created), printing each path.
fn write_export(out: &Path, files: &[hopfuse_launch::export::ExportFile]) -> Result<ExitCode> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for f in files {
        let path = out.join(&f.name);
        std::fs::write(&path, &f.bytes).with_context(|| format!("writing {}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn nvrtc_check(
    files: &[PathBuf],
    index: Option<IndexType>,
    raw_cuda: bool,
    inspect: bool,
) -> Result<ExitCode> {
    let (major, minor) = nvrtc::version()?;
    let include = nvrtc::include_dir()?;
    eprintln!(
        "NVRTC {major}.{minor}, {}, headers: {}",
        nvrtc::ARCH,
        include
            .as_ref()
            .map(|d| d.display().to_string())
            .unwrap_or_else(|| "none found".into())
    );
    let indices = match index {
        Some(i) => vec![i],
        None => vec![IndexType::I32, IndexType::I64],
    };
    let (mut passed, mut failed) = (0, 0);
    for file in files {
        let name = file.display().to_string();
        let source = match read(file) {
            Ok(s) => s,
            Err(e) => {
                println!("FAIL {name}: {e:#}");
                failed += 1;
                continue;
            }
        };
        // (label, CUDA source) pairs to build.
        let mut units = Vec::new();
        if raw_cuda {
            units.push((name.clone(), source));
        } else {
            // Every variant the runner may build: both index types, with the run-time
            // alignment check and specialised for aligned vectors; and the kernel specialised
            // to the program's first `// bench:` sizes (what `run` and `bench` build there).
            let bench = match hopfuse_runner::bench::bench_sizes(&source) {
                Ok(sizes) => sizes.into_iter().next(),
                Err(e) => {
                    println!("FAIL {name}: its `// bench:` line: {e}");
                    failed += 1;
                    None
                }
            };
            let variants = indices.iter().flat_map(|&i| {
                [(i, false, None), (i, true, None)]
                    .into_iter()
                    .chain(bench.clone().map(|sizes| (i, false, Some(sizes))))
            });
            for (index_type, assume_aligned_vectors, specialized) in variants {
                let variant = match (&specialized, assume_aligned_vectors) {
                    (Some(sizes), _) => {
                        let sizes: Vec<String> =
                            sizes.iter().map(|(k, v)| format!("{k}={v}")).collect();
                        format!(", specialised to {}", sizes.join(","))
                    }
                    (None, true) => ", aligned".to_string(),
                    (None, false) => String::new(),
                };
                let label = format!("{name} [{}{variant}]", index_type.cuda());
                let options = CompileOptions {
                    index_type,
                    assume_aligned_vectors,
                    specialize: specialized.is_some(),
                    aligned_for: specialized,
                    clock_probe: false,
                };
                // A fusion split into kernels: each kernel, labelled with its segment.
                let kernels = match hopfuse::compile_program(&source, &options) {
                    Ok(hopfuse::Compiled::One { compilation, .. }) => {
                        vec![(label, *compilation)]
                    }
                    Ok(hopfuse::Compiled::Segmented(s)) => s
                        .kernels
                        .into_iter()
                        .map(|c| (format!("{label} {}", c.plan.kernel_name), c))
                        .collect(),
                    Err(d) => {
                        println!(
                            "FAIL {label}: hopfuse compile error\n{}",
                            d.render(&source, &name)
                        );
                        failed += 1;
                        Vec::new()
                    }
                };
                for (label, c) in kernels {
                    if inspect {
                        match inspect_check(&c, index_type, assume_aligned_vectors) {
                            Ok(summary) => {
                                println!("OK   {label}: {summary}");
                                passed += 1;
                            }
                            Err(e) => {
                                println!("FAIL {label}: {e}");
                                failed += 1;
                            }
                        }
                    }
                    units.push((label, c.cuda))
                }
            }
        }
        for (label, cuda) in units {
            match nvrtc::compile(&cuda, &label).and_then(|c| c.deny_warnings(&label)) {
                Ok(cubin) => {
                    println!(
                        "OK   {label}: CUBIN {} bytes ({:.0} ms)",
                        cubin.image.len(),
                        cubin.compile_ms
                    );
                    passed += 1;
                }
                Err(e) => {
                    println!("FAIL {label}: {e}");
                    failed += 1;
                }
            }
        }
    }
    println!("nvrtc-check: {passed} passed, {failed} failed");
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `nvrtc-check --inspect` of one compilation: its PTX and SASS have line info for every
/// instruction, and the SASS reaches kernel-IR statements.
fn inspect_check(
    c: &hopfuse::Compilation,
    index_type: IndexType,
    assume_aligned_vectors: bool,
) -> Result<String> {
    use hopfuse_runner::inspect;
    let (mc, _) = inspect::machine_code(&c.cuda, &inspect::cuda_name(c), None)?;
    let variant = inspect::Variant {
        index_type,
        assume_aligned_vectors,
        reason: "nvrtc-check".into(),
    };
    let ins = inspect::assemble(c, variant, mc, false);
    if let Some(why) = &ins.sass_unavailable {
        bail!("no SASS: {why}");
    }
    let cov = inspect::coverage(&ins);
    // NVRTC marks some instructions as from no source line (`.loc 1 0 0`); every other one
    // must have its line.
    if cov.ptx_mapped == 0 || cov.ptx_mapped + ins.ptx.no_source_line != cov.ptx_instructions {
        bail!(
            "{} of {} PTX instructions have a CUDA line, {} none by NVRTC's line info; \
             without: {:?}",
            cov.ptx_mapped,
            cov.ptx_instructions,
            ins.ptx.no_source_line,
            cov.ptx_unmapped
        );
    }
    if cov.sass_mapped == 0 || cov.sass_mapped != cov.sass_instructions {
        bail!(
            "{} of {} SASS instructions have a CUDA line; without: {:?}",
            cov.sass_mapped,
            cov.sass_instructions,
            cov.unmapped
        );
    }
    if cov.statements_with_sass == 0 {
        bail!("no SASS instruction comes from a kernel-IR statement");
    }
    Ok(format!(
        "PTX {} ({} of no source line) and SASS {} instructions mapped, {} IR statements with \
         SASS, {} registers",
        cov.ptx_instructions,
        ins.ptx.no_source_line,
        cov.sass_instructions,
        cov.statements_with_sass,
        ins.resources
            .registers
            .map_or("?".to_string(), |r| r.to_string())
    ))
}

fn parse_size_args(args: &[String]) -> Result<BTreeMap<String, i64>> {
    let mut map = BTreeMap::new();
    for a in args {
        sizes::merge_sizes(&mut map, a).map_err(|e| anyhow::anyhow!("--size: {e}"))?;
    }
    Ok(map)
}

fn parse_scalar_args(args: &[String]) -> Result<BTreeMap<String, f64>> {
    let mut map = BTreeMap::new();
    for a in args {
        hopfuse_runner::scalars::merge_scalars(&mut map, a)
            .map_err(|e| anyhow::anyhow!("--scalar: {e}"))?;
    }
    Ok(map)
}

fn run(args: RunArgs) -> Result<ExitCode> {
    let req = RunRequest {
        file: args.file.display().to_string(),
        source: read(&args.file)?,
        sizes: parse_size_args(&args.size)?,
        scalars: parse_scalar_args(&args.scalar)?,
        iters: args.iters,
        warmup: args.warmup,
        seed: args.seed,
        index: args.index.map(Into::into),
        copy_ceiling: !args.no_ceiling,
        peers: args.peers,
        clock: args.clock,
        generic: args.generic,
        documents: args.documents.by_name()?,
    };
    let mut outcome = match &args.cuda_file {
        Some(path) => {
            eprintln!(
                "note: {} runs in place of the kernel generated from {}",
                path.display(),
                args.file.display()
            );
            let shown = path.display().to_string();
            engine::run_edited(&req, &read(path)?, &mut |log| {
                eprintln!("warning: NVRTC warned on {shown} (a hand edit: run anyway):\n{log}")
            })
        }
        None => engine::run(&req),
    };
    if let (Ok(result), true) = (&mut outcome, args.profile) {
        if result.segments.is_some() {
            profile_segments_run(&args, result);
        } else {
            result.profile = Some(profile_run(&args, result));
        }
    }
    let json = match &outcome {
        Ok(result) => serde_json::to_string_pretty(result)?,
        Err(e) => serde_json::to_string_pretty(&serde_json::json!({ "error": e }))?,
    };
    if let Some(path) = &args.json_file {
        std::fs::write(path, format!("{json}\n"))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if args.json {
        println!("{json}");
    }
    match outcome {
        Ok(result) => {
            if !args.json {
                println!("{}", report::render(&result));
            }
            // Each kernel of a fusion run as several: its profile in words; one missing fails.
            let segment_profiles: Vec<(&str, &ProfileReport)> = result
                .segments
                .iter()
                .flat_map(|s| &s.kernels)
                .filter_map(|k| Some((k.kernel.as_str(), k.profile.as_ref()?)))
                .collect();
            for (kernel, profiled) in &segment_profiles {
                if !args.json {
                    println!(
                        "profile of {kernel}:\n{}",
                        hopfuse_runner::profile::render(profiled)
                    );
                }
            }
            if let Some((kernel, ProfileReport::Unavailable { message, .. })) = segment_profiles
                .iter()
                .find(|(_, p)| matches!(p, ProfileReport::Unavailable { .. }))
            {
                eprintln!("no profile of {kernel}: {message}");
                return Ok(ExitCode::FAILURE);
            }
            if let Some(profiled) = &result.profile {
                if !args.json {
                    println!("{}", hopfuse_runner::profile::render(profiled));
                }
                let roofline = match profiled {
                    ProfileReport::Measured { roofline, .. } => roofline.as_ref(),
                    ProfileReport::Unavailable { .. } => None,
                };
                if let (Some(r), Some(path)) = (roofline, &args.roofline) {
                    std::fs::write(path, r.svg())
                        .with_context(|| format!("cannot write {}", path.display()))?;
                }
                // Asked for and not had: the command failed (the JSON says why).
                if let ProfileReport::Unavailable { message, .. } = profiled {
                    eprintln!("no profile: {message}");
                    return Ok(ExitCode::FAILURE);
                }
            }
            Ok(if result.passed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Err(e) => {
            eprintln!("{e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `run --profile`: the kernel under ncu, and its roofline point with this run's ceilings.
fn profile_run(args: &RunArgs, result: &engine::RunResult) -> ProfileReport {
    use hopfuse_runner::profile::{self, ProfileError};
    let profiled = std::time::Duration::try_from_secs_f64(args.profile_timeout)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            ProfileError::Request("--profile-timeout must be a positive number of seconds".into())
        })
        .and_then(|limit| {
            let exe = std::env::current_exe()
                .map_err(|e| ProfileError::Failed(format!("cannot find this binary: {e}")))?;
            let req =
                profile::request_for(args.file.clone(), result, limit, args.profile_csv.clone());
            profile::profile(&req, &exe)
        });
    // The tensor-core roof of a program that is not a matrix product, on a device of its own
    // (the run's is closed), unless ceilings are off.
    let tensor = match (&profiled, &result.cublas, args.no_ceiling) {
        (Ok(_), None, false) => engine::Device::open()
            .and_then(|dev| profile::tensor_roof::measure(&dev))
            .map_err(|e| eprintln!("no tensor-core roof: {e}"))
            .ok(),
        _ => None,
    };
    profile::report(profiled, result, result.copy.as_ref(), tensor.as_ref())
}

/// `run --profile` of a fusion run as several kernels: each kernel under ncu in turn, within
/// --profile-timeout together, into its segment's `profile`.
fn profile_segments_run(args: &RunArgs, result: &mut engine::RunResult) {
    use hopfuse_runner::profile::{self, ProfileError};
    let limit = std::time::Duration::try_from_secs_f64(args.profile_timeout)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            ProfileError::Request("--profile-timeout must be a positive number of seconds".into())
        });
    let exe = std::env::current_exe()
        .map_err(|e| ProfileError::Failed(format!("cannot find this binary: {e}")));
    let (limit, exe) = match (limit, exe) {
        (Ok(limit), Ok(exe)) => (limit, exe),
        (Err(e), _) | (_, Err(e)) => {
            for k in result.segments.iter_mut().flat_map(|s| &mut s.kernels) {
                k.profile = Some(profile::unavailable(&e));
            }
            return;
        }
    };
    let req = profile::request_for(args.file.clone(), result, limit, args.profile_csv.clone());
    let copy = result.copy.clone();
    let no_ceiling = args.no_ceiling;
    profile::profile_segments(result, &req, &exe, copy.as_ref(), &mut || {
        // The tensor-core roof on a device of its own (the run's is closed), unless ceilings
        // are off.
        if no_ceiling {
            return None;
        }
        engine::Device::open()
            .and_then(|dev| profile::tensor_roof::measure(&dev))
            .map_err(|e| eprintln!("no tensor-core roof: {e}"))
            .ok()
    });
}

fn self_test(iters: u32, warmup: u32, seed: u64, ceiling: bool) -> Result<ExitCode> {
    let (mut ok, mut bad) = (0, 0);
    for case in selftest::cases() {
        println!("== {}", case.name);
        let verdict = match selftest::run_case(&case, iters, warmup, seed, ceiling) {
            Ok(r) => {
                println!("{}", report::render(&r));
                if r.passed == case.expect_pass {
                    "as expected"
                } else {
                    "UNEXPECTED"
                }
            }
            Err(e) => {
                println!("{e}");
                "ERROR"
            }
        };
        println!("   -> {verdict}\n");
        if verdict == "as expected" {
            ok += 1;
        } else {
            bad += 1;
        }
    }
    println!("== the GPU float64 reference (cublasDgemm) against the host reference");
    match selftest::gemm_reference_check() {
        Ok(lines) => {
            lines.iter().for_each(|l| println!("{l}"));
            println!("   -> as expected\n");
            ok += 1;
        }
        Err(e) => {
            println!("{e}\n   -> ERROR\n");
            bad += 1;
        }
    }
    println!("selftest: {ok} passed, {bad} failed");
    if bad > 0 {
        bail!("{bad} self-test case(s) did not behave as expected");
    }
    Ok(ExitCode::SUCCESS)
}
