use super::*;

#[test]
fn cubins_are_cached_by_content_hash() {
    if crate::not_run::nvrtc_missing("the CUBIN cache") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("hopfuse-cubin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cuda = crate::faults::cuda(crate::faults::Fault::IllegalAddress);
    let mut out = Vec::new();
    let mut hooks = WorkerHooks {
        out: &mut out,
        cache: Some(dir.clone()),
        memory: None,
        cached: false,
        peers: None,
    };
    let first = hooks.cubin(cuda, "a.cu").unwrap();
    assert!(!hooks.cached);
    let second = hooks.cubin(cuda, "b.cu").unwrap();
    assert!(hooks.cached);
    assert_eq!(first.image, second.image);
    let events = read_events(&out[..]);
    assert!(
        matches!(events[..], [WorkerEvent::CubinCached { .. }]),
        "{events:?}"
    );
    // Another source is another entry.
    let mut hooks = WorkerHooks {
        out: &mut out,
        cache: Some(dir.clone()),
        memory: None,
        cached: false,
        peers: None,
    };
    hooks.cubin(crate::gpu::SPIN_SOURCE, "spin.cu").unwrap();
    assert!(!hooks.cached);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_warm_worker_keeps_cubins_in_memory() {
    if crate::not_run::nvrtc_missing("the CUBIN cache") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("hopfuse-cubin-mem-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cuda = crate::faults::cuda(crate::faults::Fault::Deadlock);
    let mut memory = HashMap::new();
    let mut out = Vec::new();
    let mut hooks = WorkerHooks {
        out: &mut out,
        cache: Some(dir.clone()),
        memory: Some(&mut memory),
        cached: false,
        peers: None,
    };
    let first = hooks.cubin(cuda, "a.cu").unwrap();
    assert!(!hooks.cached);
    // Gone from disk: the memory layer still has it.
    std::fs::remove_dir_all(&dir).unwrap();
    let second = hooks.cubin(cuda, "a.cu").unwrap();
    assert!(hooks.cached);
    assert_eq!(first.image, second.image);
    let events = read_events(&out[..]);
    assert!(
        matches!(&events[..], [WorkerEvent::CubinCached { from, .. }] if from == "memory"),
        "{events:?}"
    );
    assert_eq!(memory.len(), 1);
}

#[test]
fn fake_delay_from_the_program_only() {
    let source = "// fake-delay-ms: 250\nfusion";
    assert_eq!(
        fake_delay(FakeBehaviour::FromProgram, source),
        Some(std::time::Duration::from_millis(250))
    );
    assert_eq!(fake_delay(FakeBehaviour::Ok, source), None);
    assert_eq!(fake_delay(FakeBehaviour::FromProgram, "fusion"), None);
}

#[test]
fn fake_behaviour_from_the_program() {
    let b = FakeBehaviour::FromProgram;
    assert_eq!(
        b.resolve("// fake-behaviour: hang\nfusion"),
        FakeBehaviour::Hang
    );
    assert_eq!(b.resolve("fusion"), FakeBehaviour::Ok);
    assert_eq!(
        b.resolve("// fake-behaviour: cuda-error"),
        FakeBehaviour::CudaError
    );
    assert_eq!(
        FakeBehaviour::Crash.resolve("// fake-behaviour: ok"),
        FakeBehaviour::Crash
    );
}
