use super::*;

fn config(cap: usize, client_cap: usize) -> QueueConfig {
    QueueConfig {
        worker_exe: PathBuf::from("/nonexistent/hopfuse"),
        worker_args: vec![],
        timeout: Duration::from_secs(1),
        cap,
        client_cap,
        gpus: 1,
        cubin_cache: None,
        prespawn: false,
        remote: false,
    }
}

fn spec() -> JobSpec {
    JobSpec::single(crate::engine::RunRequest {
        file: "t.hf".into(),
        source: String::new(),
        sizes: Default::default(),
        scalars: Default::default(),
        iters: 1,
        warmup: 0,
        seed: 1,
        index: None,
        copy_ceiling: false,
        peers: false,
        clock: false,
        generic: false,
        documents: Default::default(),
    })
}

/// The dispatchers are gone (their runtime was dropped, as at shutdown): a submitted job
/// must still end with a result, and its counts must come back.
#[test]
fn a_job_the_dispatchers_cannot_take_ends_and_releases_its_counts() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let queue = rt.block_on(async { Queue::start(config(4, 1), None) });
    // Dropping the runtime drops the dispatcher tasks and the receiver with them.
    drop(rt);
    for _ in 0..3 {
        // With a leaked per-client count the second submit would be refused (cap 1).
        let job = queue.submit(spec(), "10.0.0.1").expect("admitted");
        let (events, _) = job.subscribe();
        let last = events.last().expect("events");
        assert_eq!(last.stage, JobStage::Done, "{events:?}");
        let result = job.result().expect("a result");
        assert_eq!(result.status, JobStatus::Error);
        assert_eq!(result.message.as_deref(), Some(NOT_RUN_MESSAGE));
        assert_eq!(queue.client_jobs("10.0.0.1"), 0);
        let stats = queue.stats();
        assert_eq!((stats.queued, stats.running), (0, 0));
    }
}

#[test]
fn slots_count_per_client_and_in_all_until_dropped() {
    let admission: Arc<Admission> = Arc::default();
    let (a1, ahead) = admission.admit("a", 3, 2).unwrap();
    assert_eq!(ahead, 0);
    let (a2, ahead) = admission.admit("a", 3, 2).unwrap();
    assert_eq!(ahead, 1);
    // The client's cap, then the queue's.
    assert_eq!(admission.admit("a", 3, 2).err(), Some((true, 2)));
    let (b1, _) = admission.admit("b", 3, 2).unwrap();
    assert_eq!(admission.admit("c", 3, 2).err(), Some((false, 3)));
    // A refused admission takes nothing.
    assert_eq!(admission.of_client("c"), 0);
    assert_eq!(admission.pending.load(Ordering::SeqCst), 3);
    drop(a1);
    assert_eq!(admission.of_client("a"), 1);
    drop((a2, b1));
    assert_eq!(admission.pending.load(Ordering::SeqCst), 0);
    assert!(admission.per_client.lock().unwrap().is_empty());
}

/// A ticket dropped by a dispatcher that fails mid-job (a panic unwinds through it) still
/// ends the job and releases its counts.
#[test]
fn a_ticket_dropped_without_a_result_ends_its_job() {
    let admission: Arc<Admission> = Arc::default();
    let (slot, _) = admission.admit("a", 1, 0).unwrap();
    let job = Arc::new(Job::new("j1".into(), "a", spec()));
    let (_, mut rx) = job.subscribe();
    let ticket = Ticket {
        job: job.clone(),
        _slot: slot,
    };
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _held = ticket;
        panic!("a dispatcher bug");
    }));
    assert!(panicked.is_err());
    let done = rx.try_recv().expect("a terminal event");
    assert_eq!(done.stage, JobStage::Done);
    assert_eq!(done.result.unwrap().status, JobStatus::Error);
    assert_eq!(admission.pending.load(Ordering::SeqCst), 0);
    assert_eq!(admission.of_client("a"), 0);
}
