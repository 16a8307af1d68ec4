//! The engine's unit tests (no GPU needed).

use super::*;
use hopfuse::plan::SizeExpr as E;
use hopfuse::CompileOptions;

fn plan(shapes: Vec<Vec<E>>) -> LaunchPlan {
    let params = shapes
        .into_iter()
        .enumerate()
        .map(|(i, shape)| Param::Tensor {
            name: format!("t{i}"),
            dtype: DType::F32,
            role: if i == 0 {
                TensorRole::Output
            } else {
                TensorRole::Input
            },
            shape,
        })
        .collect();
    LaunchPlan {
        kernel_name: "k".into(),
        index_type: IndexType::I64,
        symbols: vec!["M".into(), "N".into()],
        params,
        grid: [E::Const(1), E::Const(1), E::Const(1)],
        block: [E::Const(128), E::Const(1), E::Const(1)],
        dynamic_smem_bytes: E::Const(0),
        constraints: vec![],
        tensor_maps: vec![],
        register_sharing: None,
        cluster: None,
        matmul: None,
        persistent: None,
        auto_schedule: None,
        min_global_bytes: E::Const(0),
    }
}

fn sizes(m: i64, n: i64) -> BTreeMap<String, i64> {
    [("M".to_string(), m), ("N".to_string(), n)].into()
}

fn mn() -> Vec<E> {
    vec![E::sym("M"), E::sym("N")]
}

#[test]
fn i32_below_two_to_the_31_elements() {
    let p = plan(vec![mn(), vec![E::sym("N")]]);
    assert_eq!(
        choose_index_type(&p, &sizes(4096, 4096)).unwrap().0,
        IndexType::I32
    );
    // 2^31 - 1 elements still fit.
    let p1 = plan(vec![vec![E::sym("M")]]);
    assert_eq!(
        choose_index_type(&p1, &sizes((1 << 31) - 1, 1)).unwrap().0,
        IndexType::I32
    );
}

#[test]
fn i64_from_two_to_the_31_elements() {
    let p = plan(vec![mn(), vec![E::sym("N")]]);
    let (t, why) = choose_index_type(&p, &sizes(1 << 16, 1 << 15)).unwrap();
    assert_eq!(t, IndexType::I64);
    assert!(why.contains("t0") && why.contains("2147483648"), "{why}");
    // Broadcast shapes count their own elements only.
    let p = plan(vec![vec![E::sym("N"), E::Const(1)]]);
    assert_eq!(
        choose_index_type(&p, &sizes(1 << 20, 1 << 20)).unwrap().0,
        IndexType::I32
    );
}

#[test]
fn i64_when_a_size_does_not_fit_an_int() {
    let p = plan(vec![vec![E::Const(4)]]);
    let (t, why) = choose_index_type(&p, &sizes(1 << 31, 1)).unwrap();
    assert_eq!(t, IndexType::I64);
    assert!(why.contains("M = 2147483648"), "{why}");
}

#[test]
fn unbound_symbols_are_reported() {
    let p = plan(vec![mn()]);
    let err = choose_index_type(&p, &[("M".to_string(), 4)].into()).unwrap_err();
    assert!(err.contains("`N`") && err.contains("t0"), "{err}");
}

#[test]
fn element_counts_overflow_cleanly() {
    let shape = vec![E::sym("M"), E::sym("M"), E::sym("M")];
    assert!(tensor_elements(&shape, &sizes(1 << 30, 1))
        .unwrap_err()
        .contains("overflow"));
}

#[test]
fn requests_round_trip_through_json() {
    let req = RunRequest {
        file: "a.hf".into(),
        source: "fusion".into(),
        sizes: sizes(1, 2),
        scalars: Default::default(),
        iters: 10,
        warmup: 1,
        seed: 3,
        index: Some(IndexType::I32),
        copy_ceiling: true,
        peers: false,
        clock: false,
        generic: false,
        documents: Default::default(),
    };
    let json = serde_json::to_string(&req).unwrap();
    assert_eq!(serde_json::from_str::<RunRequest>(&json).unwrap(), req);
    let err = RunError::new(Stage::Nvrtc, "boom");
    assert_eq!(serde_json::to_value(&err).unwrap()["stage"], "nvrtc");
}

#[test]
fn pair_ratios_are_per_pair() {
    // B is twice as slow in every pair, whatever the drift of both over time.
    let a = [10.0, 20.0, 40.0, 10.0];
    let b = [20.0, 40.0, 80.0, 21.0];
    let r = PairRatios::from_samples(&a, &b).unwrap();
    assert_eq!(r.pairs, 4);
    assert_eq!((r.min, r.max), (2.0, 2.1));
    assert_eq!(r.median, 2.0);
    assert!(PairRatios::from_samples(&[], &[]).is_none());
    assert!(PairRatios::from_samples(&[1.0], &[f64::NAN]).is_none());
}

#[test]
fn ceilings_from_before_the_worker_field_still_parse() {
    let c: CopyCeiling = serde_json::from_value(serde_json::json!({
        "buffer_bytes": 1, "gbps": 2.0,
        "timing": {"samples": 1, "min_us": 1.0, "median_us": 1.0, "max_us": 1.0}
    }))
    .unwrap();
    assert_eq!((c.measured, c.age_s), (CeilingWhen::Run, 0.0));
}

/// One lowering for the sizes gives what the two whole-program variants gave: the aligned
/// kernel when the sizes keep the vectors aligned, the run-time check otherwise, with the
/// index type the sizes need; and, its block following N, launch bounds for these sizes'
/// threads (the variants, for no sizes, have 1024) with the plan's limit to match.
#[test]
fn compile_for_run_specialises_for_the_sizes_in_one_lowering() {
    let source = include_str!("../../../examples/basics/softmax.hf");
    let req = |m: i64, n: i64, index| RunRequest {
        file: "softmax.hf".into(),
        source: source.into(),
        sizes: sizes(m, n),
        scalars: Default::default(),
        iters: 1,
        warmup: 0,
        seed: 1,
        index,
        copy_ceiling: false,
        peers: false,
        clock: false,
        // The generic kernel's aligned-vector variant (a specialised one: below).
        generic: true,
        documents: Default::default(),
    };
    let variant = |index_type, assume_aligned_vectors| {
        hopfuse::compile(
            source,
            &CompileOptions {
                index_type,
                assume_aligned_vectors,
                aligned_for: None,
                specialize: false,
                clock_probe: false,
            },
        )
        .unwrap()
    };
    // Softmax's block is ceilDiv(ceilDiv(N, 4), 8) threads: 32 at N = 1023 and 1024.
    let bounded = |cuda: &str, threads: i64| {
        cuda.replace(
            &format!("__launch_bounds__({threads})"),
            "__launch_bounds__(1024)",
        )
    };
    let limit = |plan: &hopfuse::plan::LaunchPlan| {
        plan.constraints.iter().find_map(|c| match c {
            hopfuse::plan::Constraint::AtMost { max, reason, .. }
                if reason.starts_with("threads per block") =>
            {
                Some(*max)
            }
            _ => None,
        })
    };
    let (aligned, setup) = compile_for_run(&req(64, 1024, None)).unwrap();
    assert_eq!(setup.index_type, IndexType::I32);
    assert_eq!(
        bounded(&aligned.cuda, 32),
        variant(IndexType::I32, true).cuda
    );
    assert_eq!(limit(&aligned.plan), Some(32));
    assert!(aligned
        .plan
        .constraints
        .iter()
        .any(|c| matches!(c, hopfuse::plan::Constraint::Divisible { .. })));
    assert!(!aligned.cuda.contains("% 4 == 0"), "{}", aligned.cuda);
    let (checked, _) = compile_for_run(&req(64, 1023, None)).unwrap();
    assert!(checked.cuda.contains("m2 * N % 4 == 0"), "{}", checked.cuda);
    assert_eq!(
        bounded(&checked.cuda, 32),
        variant(IndexType::I32, false).cuda
    );
    let mut plan = checked.plan.clone();
    for c in &mut plan.constraints {
        if let hopfuse::plan::Constraint::AtMost { max, reason, .. } = c {
            if reason.starts_with("threads per block") {
                (*max, *reason) = (1024, "threads per block".into());
            }
        }
    }
    assert_eq!(plan, variant(IndexType::I32, false).plan);
    // 2^32 elements: a 64-bit index, chosen after the one lowering.
    let (big, setup) = compile_for_run(&req(1 << 17, 1 << 15, None)).unwrap();
    assert_eq!(
        (setup.index_type, big.plan.index_type),
        (IndexType::I64, IndexType::I64)
    );
    assert_eq!(bounded(&big.cuda, 1024), variant(IndexType::I64, true).cuda);
    assert_eq!(limit(&big.plan), Some(1024));
    match compile_for_run(&req(1 << 17, 1 << 15, Some(IndexType::I32))) {
        Err(PrepareError::Sizes(e)) => assert!(e.contains("too small"), "{e}"),
        other => panic!("{other:?}"),
    }
    match compile_for_run(&req(64, 0, None)) {
        Err(PrepareError::Sizes(e)) => assert!(e.contains("positive"), "{e}"),
        other => panic!("{other:?}"),
    }
}

/// A run compiles its kernel specialised to its sizes unless it asks for the generic one; a
/// program prepared for some sizes (as the service hands it to the worker) is refused at
/// others, with the sizes it was compiled for.
#[test]
fn runs_specialise_to_their_sizes_and_refuse_others() {
    let source = include_str!("../../../examples/auto/softmax.hf");
    let req = |m: i64, n: i64, generic| RunRequest {
        file: "softmax.hf".into(),
        source: source.into(),
        sizes: sizes(m, n),
        scalars: Default::default(),
        iters: 1,
        warmup: 0,
        seed: 1,
        index: None,
        copy_ceiling: false,
        peers: false,
        clock: false,
        generic,
        documents: Default::default(),
    };
    let (special, setup) = compile_for_run(&req(8192, 16384, false)).unwrap();
    assert_eq!(
        special.plan.specialized_sizes(),
        Some(sizes(8192, 16384)),
        "{:?}",
        special.plan.constraints
    );
    assert!(special.cuda.contains("m2 * 16384"), "{}", special.cuda);
    let (generic, generic_setup) = compile_for_run(&req(8192, 16384, true)).unwrap();
    assert_eq!(generic.plan.specialized_sizes(), None);
    assert!(generic.cuda.contains("m2 * N"), "{}", generic.cuda);
    // The same launch, parameters and index type either way.
    assert_eq!(setup, generic_setup);
    assert_eq!(special.plan.params, generic.plan.params);
    // Prepared for 8192 x 16384, run at 8192 x 8192: refused before any device.
    let prepared = Prepared::new(&special, setup);
    let e = ForRun::of(&req(8192, 8192, false), Some(&prepared))
        .err()
        .expect("refused");
    assert_eq!(e.stage, Stage::Sizes);
    assert!(
        e.message.contains("the kernel is specialised to its sizes")
            && e.message
                .contains("N = 8192, but it was compiled for N = 16384"),
        "{}",
        e.message
    );
    assert!(ForRun::of(&req(8192, 16384, false), Some(&prepared)).is_ok());
    // A size that is not positive is the sizes' error, as for the generic kernel.
    match compile_for_run(&req(64, 0, false)) {
        Err(PrepareError::Sizes(e)) => assert!(e.contains("positive"), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_iteration_counts_are_rejected() {
    let mut req = RunRequest {
        file: "a.hf".into(),
        source: "@@@ not a program".into(),
        sizes: BTreeMap::new(),
        scalars: Default::default(),
        iters: 0,
        warmup: 0,
        seed: 1,
        index: None,
        copy_ceiling: false,
        peers: false,
        clock: false,
        generic: false,
        documents: Default::default(),
    };
    assert_eq!(run(&req).unwrap_err().stage, Stage::Request);
    req.iters = 1;
    // Not a program: fails at compile time.
    assert_eq!(run(&req).unwrap_err().stage, Stage::Compile);
}

/// A/B runs take a fusion split into several kernels on either side or both: nothing refuses
/// it before the device. Without a GPU both sides stop at opening it (or at NVRTC); with one, both run,
/// validated on their final outputs, timed in pairs (B/A per pair) and each split side's
/// kernels timed alone.
#[test]
fn ab_runs_take_split_programs_on_either_side() {
    let split = include_str!("../../../examples/auto/col_norm.hf");
    let single = "fusion col_scale {\n  input x: f32[M, N]\n  y = x * x\n  output y\n}\n";
    let req = |source: &str, clock| RunRequest {
        file: "ab.hf".into(),
        source: source.into(),
        sizes: sizes(64, 32),
        scalars: Default::default(),
        iters: 5,
        warmup: 1,
        seed: 1,
        index: None,
        copy_ceiling: false,
        peers: false,
        clock,
        generic: false,
        documents: Default::default(),
    };
    let kernels = |source: &str| if source == split { 2 } else { 1 };
    match ab::Program::of(&req(split, false), None, &mut NoHooks) {
        Ok(ab::Program::Split(s)) => assert_eq!(s.segments.len(), 2),
        Ok(ab::Program::One(_)) => panic!("col_norm at 64 x 32 is split"),
        Err(e) => panic!("{e}"),
    }
    assert!(matches!(
        ab::Program::of(&req(single, false), None, &mut NoHooks),
        Ok(ab::Program::One(_))
    ));
    for (a, b) in [(split, single), (single, split), (split, split)] {
        let ab = run_ab_on(
            &mut None,
            (&req(a, false), None),
            (&req(b, false), None),
            &mut NoHooks,
        );
        match (ab.a, ab.b) {
            (Ok(ra), Ok(rb)) => {
                for (r, source) in [(&ra, a), (&rb, b)] {
                    assert!(r.passed, "{:?}", r.validation);
                    assert_eq!(r.kernel_count(), kernels(source), "{}", r.kernel);
                    if let Some(s) = &r.segments {
                        assert!(s.kernels.iter().all(|k| k.timing.median_us > 0.0));
                    }
                }
                let ratios = ab.ratios.expect("both measured: B/A per pair");
                assert_eq!(ratios.pairs, 5);
            }
            (ra, rb) => {
                assert!(ab.ratios.is_none());
                // Stopped by the machine (no GPU; no NVRTC either where it is not set up), never
                // refused as a request.
                for e in [ra.err(), rb.err()] {
                    let e = e.expect("without a GPU neither side runs");
                    assert!(matches!(e.stage, Stage::Cuda | Stage::Nvrtc), "{e}");
                }
            }
        }
    }
    // The clock probe measures one kernel: refused for the split side alone, before the
    // device, while the other side still runs alone (or stops at the device).
    let ab = run_ab_on(
        &mut None,
        (&req(split, true), None),
        (&req(single, false), None),
        &mut NoHooks,
    );
    let e = ab.a.expect_err("a split program's clock probe is refused");
    assert_eq!(e.stage, Stage::Request, "{e}");
    assert!(
        e.message.contains("the clock probe measures one kernel"),
        "{e}"
    );
    assert!(ab.ratios.is_none());
    if let Err(e) = ab.b {
        assert!(matches!(e.stage, Stage::Cuda | Stage::Nvrtc), "{e}");
    }
}

#[test]
fn a_hand_edits_nvrtc_warnings_are_reported_not_refused() {
    if crate::not_run::nvrtc_missing("a hand edit's warnings through NVRTC") {
        return;
    }
    // What an edit that leaves a variable unused looks like to NVRTC (warning #177-D).
    let cuda =
        "extern \"C\" __global__ void k(float* x) { float unused[1]; x[threadIdx.x] = 1.0f; }\n";
    assert!(matches!(
        NoHooks.cubin(cuda, "edit.cu"),
        Err(nvrtc::NvrtcError::Warnings { .. })
    ));
    let mut logs = Vec::new();
    let cubin = EditedHooks {
        warned: &mut |log: &str| logs.push(log.to_string()),
    }
    .cubin(cuda, "edit.cu")
    .expect("compiled despite the warning");
    assert!(!cubin.image.is_empty());
    assert_eq!(logs.len(), 1);
    assert!(logs[0].contains("unused"), "{}", logs[0]);
}

/// `--documents`: the device's bytes, the reference's values and the torch peers' input files
/// of a run are the same values, packed-document ids for the inputs named, shared by `doc_q`
/// and `doc_k` position by position.
#[test]
fn device_reference_and_peers_get_the_same_packed_documents() {
    let source = include_str!("../../../examples/auto/attention_document.hf");
    let (b, s, t) = (2usize, 700usize, 1100usize);
    let sizes: BTreeMap<String, i64> = [("B", b), ("S", s), ("T", t)]
        .map(|(k, v)| (k.to_string(), v as i64))
        .into();
    let eight = std::num::NonZeroU32::new(8).unwrap();
    let req = RunRequest {
        file: "attention_document.hf".into(),
        source: source.into(),
        sizes,
        scalars: Default::default(),
        iters: 1,
        warmup: 0,
        seed: 12,
        index: None,
        copy_ceiling: false,
        peers: true,
        clock: false,
        generic: false,
        documents: [("doc_q".to_string(), eight), ("doc_k".to_string(), eight)].into(),
    };
    let mut seeded = host::SeededInputs::new(&req).unwrap();
    let tensors = [
        ("q", DType::BF16, b * s * 128),
        ("k", DType::BF16, b * t * 128),
        ("v", DType::BF16, b * t * 128),
        ("doc_q", DType::I32, b * s),
        ("doc_k", DType::I32, b * t),
    ];
    let device: BTreeMap<&str, Vec<u8>> = tensors
        .iter()
        .map(|&(name, dtype, n)| (name, seeded.tensor(name, dtype, n)))
        .collect();
    let dir = std::env::temp_dir().join(format!("hopfuse-engine-documents-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fusion = hopfuse::reference_fusion(source).unwrap();
    let files = crate::peers::write_inputs(&req, &fusion, &dir).unwrap();
    for (name, dtype, _) in tensors {
        let entry = files.iter().find(|f| f["name"] == name).unwrap();
        let file = std::fs::read(entry["file"].as_str().unwrap()).unwrap();
        assert!(
            file == device[name],
            "`{name}`: the peers' file differs from the device's"
        );
        assert_eq!(data::decode(dtype, &file), seeded.values[name], "`{name}`");
    }
    let _ = std::fs::remove_dir_all(&dir);
    // The ids the three of them got: packed documents, doc_q's the start of doc_k's rows.
    let (doc_q, doc_k) = (&seeded.values["doc_q"], &seeded.values["doc_k"]);
    for row in 0..b {
        let q = &doc_q[row * s..(row + 1) * s];
        assert_eq!(q, &doc_k[row * t..row * t + s]);
        assert_eq!(q[0], 0.0);
        assert!(q.windows(2).all(|w| w[1] == w[0] || w[1] == w[0] + 1.0));
        // About S / 8 documents, not the seeded {-8..8}.
        assert!((40.0..140.0).contains(&q[s - 1]), "{}", q[s - 1]);
    }
    // A request naming an input the program cannot fill is refused before anything is made.
    let bad = RunRequest {
        documents: [("scale".to_string(), eight)].into(),
        ..req
    };
    let err = host::SeededInputs::new(&bad).err().unwrap();
    assert_eq!(err.stage, Stage::Request);
    assert!(err.message.contains("`scale` is f32"), "{}", err.message);
}
