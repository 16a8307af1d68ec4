//! The service's storage: short links and run history, through sqlx's `Any` driver.
//!
//! SQLite by default (a file path or `sqlite://...` URL); a `postgres://...` URL works too: the
//! SQL here is the common subset (`$n` parameters, `TEXT`/`BIGINT`, `ON CONFLICT DO NOTHING`).
//! The schema is made by the migrations in `runner/migrations/` (sqlx's migrator, compiled in),
//! which also bring a database from before them up to date.
//!
//! Links are stored once per content (the id is a hash of it) and bounded by a [`LinkQuota`]:
//! the bytes one client adds within an hour, and the bytes of all links (a link already stored
//! costs nothing). The run history is bounded by a [`Retention`] policy (count, age, bytes: `--keep-runs`,
//! `--keep-runs-days`, `--keep-runs-bytes`), enforced at start and then in the background, off
//! the path of the job whose run is stored: every [`Retention::prune_every`] inserts wake a
//! pruning task, which finds the first run not kept through the `runs_retention` index (an
//! offset for the count, a running sum of `bytes` only when the total is over) and deletes it
//! and everything older in batches of [`PRUNE_BATCH`]. Between passes the history may hold up
//! to `prune_every` runs past its count. The oldest runs go first.
//!
//! A finished run never waits on an unreachable database for long: its write gets
//! [`RUN_WRITE_TIMEOUT`], and a run that cannot be written then (or while earlier ones wait)
//! joins a backlog in memory, in order, which a background task writes once the database
//! answers again (trying every [`BACKLOG_RETRY`]). The backlog holds at most
//! [`BACKLOG_RUNS`] runs by default; past that the oldest waiting run is dropped with a warning,
//! and runs still waiting when the service exits are lost (it says how many). A run the
//! database refuses (its data, not its connection) is dropped with a warning too.

use sha2::{Digest, Sha256};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::{AnyPool, Row, SqlStr};
use std::path::Path;
use std::time::Duration;

#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    retention: Retention,
    pruning: std::sync::Arc<Pruning>,
    backlog: std::sync::Arc<Backlog>,
    link_quota: LinkQuota,
    /// The bytes of all links as last summed, and when ([`Store::link_bytes`]).
    link_total: std::sync::Arc<std::sync::Mutex<Option<(u64, std::time::Instant)>>>,
}

/// How much link content the store takes in; `None`: no bound of that kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LinkQuota {
    /// Bytes of new links one client may add within [`LINK_WINDOW_S`].
    pub per_client: Option<u64>,
    /// Bytes of all links together.
    pub total: Option<u64>,
}

/// The window of [`LinkQuota::per_client`], in seconds.
pub const LINK_WINDOW_S: i64 = 3600;

/// How long a summed total of the links' bytes is trusted before it is summed again (other
/// front-ends on the same database add links too).
const LINK_TOTAL_TTL: Duration = Duration::from_secs(60);

/// Why a link was not stored.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("this client added {used} bytes of links in the last hour; at most {quota}")]
    ClientQuota {
        used: u64,
        quota: u64,
        /// Seconds until its oldest link of the hour leaves the window.
        retry_after_s: u64,
    },
    #[error("the link store holds {used} bytes; at most {max}")]
    Full { used: u64, max: u64 },
    #[error(transparent)]
    Store(#[from] Error),
}

/// The background pruning's state, shared by a store's clones.
#[derive(Default)]
struct Pruning {
    /// Runs inserted since the pruning task was last woken.
    inserted: std::sync::atomic::AtomicU64,
    wake: tokio::sync::Notify,
    /// Passes the task has finished (tests wait on it).
    passes: std::sync::atomic::AtomicU64,
}

/// Runs waiting in memory for the database by default (`hopfuse serve --run-backlog`,
/// [`Store::with_backlog_limit`]): about 10 KB each, so at most about 100 MB.
pub const BACKLOG_RUNS: usize = 10_000;

/// How long a finished run's write may wait for the database before the run joins the backlog
/// (how late a job's `done` can be while the database is away).
pub const RUN_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// How often the backlog's writer tries an unreachable database again.
pub const BACKLOG_RETRY: Duration = Duration::from_secs(1);

/// A finished run not yet written.
#[derive(Clone)]
struct PendingRun {
    id: String,
    created_us: i64,
    status: String,
    client: String,
    request: serde_json::Value,
    result: serde_json::Value,
    /// When it joined the backlog (its age in `GET /api/health`).
    waiting_since: std::time::Instant,
}

/// Finished runs waiting for the database, oldest first, shared by a store's clones.
struct Backlog {
    runs: std::sync::Mutex<std::collections::VecDeque<PendingRun>>,
    limit: std::sync::atomic::AtomicUsize,
    dropped: std::sync::atomic::AtomicU64,
    wake: tokio::sync::Notify,
}

impl Backlog {
    fn new(limit: usize) -> Backlog {
        Backlog {
            runs: Default::default(),
            limit: limit.into(),
            dropped: Default::default(),
            wake: Default::default(),
        }
    }

    fn is_empty(&self) -> bool {
        self.runs.lock().expect("backlog lock").is_empty()
    }

    /// Adds `run` last, dropping the oldest waiting run when the backlog is full.
    fn push(&self, mut run: PendingRun) {
        run.waiting_since = std::time::Instant::now();
        use std::sync::atomic::Ordering;
        let limit = self.limit.load(Ordering::Relaxed).max(1);
        let mut runs = self.runs.lock().expect("backlog lock");
        while runs.len() >= limit {
            let Some(old) = runs.pop_front() else { break };
            self.dropped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                run = %old.id,
                "the database is unreachable and {limit} finished runs wait for it already: \
                 the oldest is dropped from the run history"
            );
        }
        runs.push_back(run);
        drop(runs);
        self.wake.notify_one();
    }
}

/// Whether a failed write may succeed later: the database was unreachable or busy, not
/// refusing the data (SQLSTATE classes 22 data, 23 constraint, 42 syntax or access).
fn retryable(e: &Error) -> bool {
    match e {
        sqlx::Error::Database(db) => !db
            .code()
            .is_some_and(|c| ["22", "23", "42"].iter().any(|class| c.starts_with(class))),
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        _ => false,
    }
}

/// Runs deleted by one statement of a pruning pass: short transactions, so inserts (SQLite has
/// one writer) wait little.
pub const PRUNE_BATCH: i64 = 1000;

/// How much run history is kept; `None`: no bound of that kind. Links are never removed.
#[derive(Clone, Debug, PartialEq)]
pub struct Retention {
    /// The newest this many runs.
    pub max_runs: Option<u64>,
    /// Runs younger than this.
    pub max_age: Option<Duration>,
    /// The newest runs whose request and result JSON add up to at most this many bytes.
    pub max_bytes: Option<u64>,
}

impl Retention {
    /// Inserts between two pruning passes: 1% of the count kept (1 to 100), 100 without one.
    pub fn prune_every(&self) -> u64 {
        self.max_runs.map_or(100, |m| (m / 100).clamp(1, 100))
    }

    /// Keep everything.
    pub const UNBOUNDED: Retention = Retention {
        max_runs: None,
        max_age: None,
        max_bytes: None,
    };
}

/// What one enforcement of the retention policy removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub runs: u64,
}

// Defined in `hopfuse-api` (the answers of `GET /api/links/{id}` and `GET /api/runs`).
pub use hopfuse_api::service::{Link, RunBacklog, RunRecord};

pub type Error = sqlx::Error;

/// The database URL for `--db`: a URL as it is, a path as a SQLite file created when missing.
pub fn database_url(db: &str) -> String {
    if db.contains("://") || db.starts_with("sqlite:") {
        db.to_string()
    } else {
        format!("sqlite://{db}?mode=rwc")
    }
}

/// The schema, version by version (`runner/migrations/NNNN_name.sql`).
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "init", include_str!("../migrations/0001_init.sql")),
    (
        2,
        "run size and order",
        include_str!("../migrations/0002_run_size_and_order.sql"),
    ),
    (
        3,
        "link quota",
        include_str!("../migrations/0003_link_quota.sql"),
    ),
];

fn migrator() -> Migrator {
    Migrator::with_migrations(
        MIGRATIONS
            .iter()
            .map(|&(version, name, sql)| {
                Migration::new(
                    version,
                    name.into(),
                    MigrationType::Simple,
                    SqlStr::from_static(sql),
                    false,
                )
            })
            .collect(),
    )
}

fn now() -> i64 {
    now_us() / 1_000_000
}

/// Microseconds since the Unix epoch.
fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// The canonical text of a link's content (`serde_json` maps are sorted, so equal JSON values
/// print the same).
fn canonical(program: &str, state: &serde_json::Value) -> String {
    serde_json::to_string(&serde_json::json!({ "program": program, "state": state }))
        .expect("JSON values serialize")
}

/// Lowercase base32 (RFC 4648 alphabet) of the SHA-256 of the content, `len` characters.
pub fn link_id(program: &str, state: &serde_json::Value, len: usize) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let digest = Sha256::digest(canonical(program, state).as_bytes());
    let mut out = String::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for &b in digest.iter() {
        if out.len() >= len {
            break;
        }
        acc = (acc << 8) | b as u32;
        bits += 8;
        while bits >= 5 && out.len() < len {
            bits -= 5;
            out.push(ALPHABET[((acc >> bits) & 31) as usize] as char);
        }
        acc &= (1 << bits) - 1;
    }
    out
}

/// Lengths tried for a link id: 12 characters (60 bits) unless that id is taken by different
/// content, then longer.
const ID_LENGTHS: [usize; 3] = [12, 20, 51];

impl Store {
    /// Connects (creating a SQLite file and its directory when needed), migrates the schema to
    /// the current version, and keeps the run history within `retention`.
    pub async fn open(db: &str, retention: Retention) -> Result<Store, Error> {
        sqlx::any::install_default_drivers();
        let url = database_url(db);
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .map(|p| p.split('?').next().unwrap_or(p))
        {
            if let Some(dir) = Path::new(path)
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
            {
                std::fs::create_dir_all(dir).map_err(Error::Io)?;
            }
        }
        let sqlite = url.starts_with("sqlite:");
        let options = AnyPoolOptions::new()
            // SQLite has one writer; more connections only contend for its lock.
            .max_connections(if sqlite { 1 } else { 8 })
            // A request that reads the history while the database is away answers in seconds,
            // not after sqlx's default of 30.
            .acquire_timeout(Duration::from_secs(5));
        // The first connection may wait for a database that is starting or busy as long as
        // sqlx's default would (30 s): the 5 s above is for requests, not for start-up.
        let patient_until = std::time::Instant::now() + Duration::from_secs(30);
        let pool = loop {
            match options.clone().connect(&url).await {
                Ok(pool) => break pool,
                Err(sqlx::Error::PoolTimedOut | sqlx::Error::Io(_))
                    if std::time::Instant::now() < patient_until =>
                {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => return Err(e),
            }
        };
        migrator()
            .run(&pool)
            .await
            .map_err(|e| Error::Migrate(Box::new(e)))?;
        let store = Store {
            pool,
            retention,
            pruning: Default::default(),
            backlog: std::sync::Arc::new(Backlog::new(BACKLOG_RUNS)),
            link_quota: LinkQuota::default(),
            link_total: Default::default(),
        };
        store.prune_runs().await?;
        let pruner = store.clone();
        tokio::spawn(async move {
            loop {
                pruner.pruning.wake.notified().await;
                if pruner.pool.is_closed() {
                    return;
                }
                if let Err(e) = pruner.prune_runs().await {
                    tracing::warn!("cannot prune the run history: {e}");
                }
                pruner
                    .pruning
                    .passes
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        let writer = store.clone();
        tokio::spawn(async move { writer.write_backlog().await });
        Ok(store)
    }

    /// The store with a backlog of at most `runs` runs (else [`BACKLOG_RUNS`]).
    pub fn with_backlog_limit(self, runs: usize) -> Store {
        (self.backlog.limit).store(runs.max(1), std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// The runs waiting for the database, the oldest one's age, and those dropped.
    pub fn backlog(&self) -> RunBacklog {
        let runs = self.backlog.runs.lock().expect("backlog lock");
        RunBacklog {
            waiting: runs.len(),
            oldest_age_s: runs
                .front()
                .map(|run| run.waiting_since.elapsed().as_secs_f64()),
            dropped: (self.backlog.dropped).load(std::sync::atomic::Ordering::Relaxed),
            limit: (self.backlog.limit).load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// The backlog's writer: whenever runs wait, writes them oldest first; while the database
    /// is unreachable, tries again every [`BACKLOG_RETRY`]. Ends when the pool is closed.
    async fn write_backlog(&self) {
        loop {
            if self.backlog.is_empty() {
                self.backlog.wake.notified().await;
            }
            if self.pool.is_closed() {
                return;
            }
            loop {
                // Written from a copy: the lock is not held across the write.
                let front = self
                    .backlog
                    .runs
                    .lock()
                    .expect("backlog lock")
                    .front()
                    .cloned();
                let Some(written) = front else { break };
                let outcome = tokio::time::timeout(RUN_WRITE_TIMEOUT, self.write(&written)).await;
                match outcome {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) if !retryable(&e) => {
                        self.backlog
                            .dropped
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tracing::warn!(run = %written.id, "the database refused a waiting run, which is dropped: {e}");
                    }
                    _ => {
                        if self.pool.is_closed() {
                            return;
                        }
                        tokio::time::sleep(BACKLOG_RETRY).await;
                        continue;
                    }
                }
                let mut runs = self.backlog.runs.lock().expect("backlog lock");
                // Unless the backlog dropped it meanwhile (it was full).
                if runs.front().is_some_and(|r| r.id == written.id) {
                    runs.pop_front();
                }
                if runs.is_empty() {
                    tracing::info!("the runs that waited for the database are stored");
                }
            }
        }
    }

    /// The store with this link quota.
    pub fn with_link_quota(mut self, quota: LinkQuota) -> Store {
        self.link_quota = quota;
        self
    }

    /// Stores a link and returns it; the same program and state always get the same id, and a
    /// link already stored is returned without counting against the quota. A new one counts
    /// its program and state text against `client`'s hour and the total.
    pub async fn put_link(
        &self,
        program: &str,
        state: &serde_json::Value,
        client: &str,
    ) -> Result<Link, LinkError> {
        let state_text = serde_json::to_string(state).expect("JSON values serialize");
        let bytes = (program.len() + state_text.len()) as u64;
        for len in ID_LENGTHS {
            let id = link_id(program, state, len);
            if let Some(link) = self.get_link(&id).await? {
                if link.program == program && &link.state == state {
                    return Ok(link);
                }
                // Taken by different content: a longer id.
                continue;
            }
            self.check_link_quota(client, bytes).await?;
            let inserted = sqlx::query(
                "INSERT INTO links (id, program, state, created_at, client, bytes) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING",
            )
            .bind(&id)
            .bind(program)
            .bind(&state_text)
            .bind(now())
            .bind(client)
            .bind(bytes as i64)
            .execute(&self.pool)
            .await?
            .rows_affected();
            if inserted == 1 {
                if let Some((total, _)) = self.link_total.lock().expect("link total lock").as_mut()
                {
                    *total += bytes;
                }
            }
            let link = self.get_link(&id).await?.ok_or(Error::RowNotFound)?;
            if link.program == program && &link.state == state {
                return Ok(link);
            }
        }
        Err(Error::Protocol("link id collision at every length".to_string()).into())
    }

    /// Refuses `bytes` more of links from `client` past either quota.
    async fn check_link_quota(&self, client: &str, bytes: u64) -> Result<(), LinkError> {
        if let Some(max) = self.link_quota.total {
            let used = self.link_bytes().await?;
            if used + bytes > max {
                return Err(LinkError::Full { used, max });
            }
        }
        if let Some(quota) = self.link_quota.per_client {
            let since = now() - LINK_WINDOW_S;
            let row = sqlx::query(
                "SELECT CAST(COALESCE(SUM(bytes), 0) AS BIGINT) AS used, \
                 CAST(COALESCE(MIN(created_at), 0) AS BIGINT) AS oldest \
                 FROM links WHERE client = $1 AND created_at > $2",
            )
            .bind(client)
            .bind(since)
            .fetch_one(&self.pool)
            .await?;
            let used = row.try_get::<i64, _>("used")?.max(0) as u64;
            if used + bytes > quota {
                let oldest: i64 = row.try_get("oldest")?;
                let retry_after_s = (oldest + LINK_WINDOW_S - now()).clamp(1, LINK_WINDOW_S) as u64;
                return Err(LinkError::ClientQuota {
                    used,
                    quota,
                    retry_after_s,
                });
            }
        }
        Ok(())
    }

    /// The bytes of all links: summed at most every [`LINK_TOTAL_TTL`], this store's own
    /// inserts added in between.
    pub async fn link_bytes(&self) -> Result<u64, Error> {
        if let Some((total, at)) = *self.link_total.lock().expect("link total lock") {
            if at.elapsed() < LINK_TOTAL_TTL {
                return Ok(total);
            }
        }
        let row = sqlx::query("SELECT CAST(COALESCE(SUM(bytes), 0) AS BIGINT) AS bytes FROM links")
            .fetch_one(&self.pool)
            .await?;
        let total = row.try_get::<i64, _>("bytes")?.max(0) as u64;
        *self.link_total.lock().expect("link total lock") =
            Some((total, std::time::Instant::now()));
        Ok(total)
    }

    pub async fn get_link(&self, id: &str) -> Result<Option<Link>, Error> {
        let row = sqlx::query("SELECT id, program, state, created_at FROM links WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| {
            let state: String = r.try_get("state")?;
            Ok(Link {
                id: r.try_get("id")?,
                program: r.try_get("program")?,
                state: serde_json::from_str(&state).unwrap_or(serde_json::Value::Null),
                created_at: r.try_get("created_at")?,
            })
        })
        .transpose()
    }

    /// Adds a finished job to the run history (a job id is stored once); every
    /// [`Retention::prune_every`] inserts wake the background pruning (the caller does not wait
    /// for it). Waits at most [`RUN_WRITE_TIMEOUT`] for the database: a run it cannot write then,
    /// or while earlier runs wait, joins the backlog (the module's doc) and is `Ok` too. An
    /// error is the database refusing the run.
    pub async fn put_run(
        &self,
        id: &str,
        status: &str,
        client: &str,
        request: &serde_json::Value,
        result: &serde_json::Value,
    ) -> Result<(), Error> {
        let run = PendingRun {
            id: id.to_string(),
            created_us: now_us(),
            status: status.to_string(),
            client: client.to_string(),
            request: request.clone(),
            result: result.clone(),
            waiting_since: std::time::Instant::now(),
        };
        // After runs that wait: the history stays in order, and the database is away anyway.
        if self.backlog.is_empty() {
            match tokio::time::timeout(RUN_WRITE_TIMEOUT, self.write(&run)).await {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) if !retryable(&e) => return Err(e),
                Ok(Err(e)) => {
                    tracing::warn!(run = %id, "cannot reach the database ({e}): the run waits in memory")
                }
                Err(_) => tracing::warn!(
                    run = %id,
                    "the database did not answer in {} s: the run waits in memory",
                    RUN_WRITE_TIMEOUT.as_secs()
                ),
            }
        }
        self.backlog.push(run);
        Ok(())
    }

    /// Inserts `run` and counts it towards the next pruning pass.
    async fn write(&self, run: &PendingRun) -> Result<(), Error> {
        self.insert_run(
            &run.id,
            run.created_us,
            &run.status,
            &run.client,
            &run.request,
            &run.result,
        )
        .await?;
        use std::sync::atomic::Ordering;
        let inserted = self.pruning.inserted.fetch_add(1, Ordering::SeqCst) + 1;
        if inserted >= self.retention.prune_every() {
            self.pruning.inserted.store(0, Ordering::SeqCst);
            self.pruning.wake.notify_one();
        }
        Ok(())
    }

    /// Pruning passes the background task has finished.
    pub fn prune_passes(&self) -> u64 {
        self.pruning
            .passes
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Inserts a run finished at `created_us` (microseconds since the epoch).
    async fn insert_run(
        &self,
        id: &str,
        created_us: i64,
        status: &str,
        client: &str,
        request: &serde_json::Value,
        result: &serde_json::Value,
    ) -> Result<(), Error> {
        let request = serde_json::to_string(request).expect("JSON values serialize");
        let result = serde_json::to_string(result).expect("JSON values serialize");
        let bytes = (request.len() + result.len()) as i64;
        sqlx::query(
            "INSERT INTO runs (id, created_at, created_us, status, client, request, result, bytes) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING",
        )
        .bind(id)
        .bind(created_us.div_euclid(1_000_000))
        .bind(created_us)
        .bind(status)
        .bind(client)
        .bind(request)
        .bind(result)
        .bind(bytes)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Removes the runs the retention policy does not keep: older than `max_age`, then, newest
    /// first, every run from the first one past `max_runs` or past `max_bytes` on. Reads the
    /// `runs_retention` index, never the rows; deletes in batches of [`PRUNE_BATCH`].
    pub async fn prune_runs(&self) -> Result<Pruned, Error> {
        let Retention {
            max_runs,
            max_age,
            max_bytes,
        } = self.retention;
        let mut pruned = Pruned::default();
        if let Some(age) = max_age {
            let age_us = i64::try_from(age.as_micros()).unwrap_or(i64::MAX);
            let cutoff = now_us().saturating_sub(age_us);
            pruned.runs += self.delete_through((cutoff, String::new()), false).await?;
        }
        // The first run (newest first) past the count, and the first past the bytes: it and
        // every older one go.
        let mut first_dropped: Option<(i64, String)> = None;
        if let Some(m) = max_runs {
            let row = sqlx::query(
                "SELECT created_us, id FROM runs ORDER BY created_us DESC, id DESC \
                 LIMIT 1 OFFSET $1",
            )
            .bind(i64::try_from(m).unwrap_or(i64::MAX))
            .fetch_optional(&self.pool)
            .await?;
            if let Some(r) = row {
                first_dropped = Some((r.try_get("created_us")?, r.try_get("id")?));
            }
        }
        if let Some(m) = max_bytes.filter(|&m| m < i64::MAX as u64) {
            if self.run_totals().await?.1 > m {
                let row = sqlx::query(
                    "SELECT created_us, id FROM (SELECT created_us, id, SUM(bytes) OVER \
                     (ORDER BY created_us DESC, id DESC) AS newer FROM runs) AS kept \
                     WHERE newer > $1 ORDER BY created_us DESC, id DESC LIMIT 1",
                )
                .bind(m as i64)
                .fetch_optional(&self.pool)
                .await?;
                if let Some(r) = row {
                    let by_bytes: (i64, String) = (r.try_get("created_us")?, r.try_get("id")?);
                    first_dropped = first_dropped.max(Some(by_bytes));
                }
            }
        }
        if let Some(through) = first_dropped {
            pruned.runs += self.delete_through(through, true).await?;
        }
        Ok(pruned)
    }

    /// Deletes, oldest first in batches, the runs before `(created_us, id)` (and that run too
    /// when `inclusive`).
    async fn delete_through(
        &self,
        (created_us, id): (i64, String),
        inclusive: bool,
    ) -> Result<u64, Error> {
        let sql = if inclusive {
            "DELETE FROM runs WHERE id IN (SELECT id FROM runs WHERE created_us < $1 OR \
             (created_us = $1 AND id <= $2) ORDER BY created_us, id LIMIT $3)"
        } else {
            "DELETE FROM runs WHERE id IN (SELECT id FROM runs WHERE created_us < $1 OR \
             (created_us = $1 AND id < $2) ORDER BY created_us, id LIMIT $3)"
        };
        let mut deleted = 0;
        loop {
            let done = sqlx::query(sql)
                .bind(created_us)
                .bind(&id)
                .bind(PRUNE_BATCH)
                .execute(&self.pool)
                .await?
                .rows_affected();
            deleted += done;
            if done < PRUNE_BATCH as u64 {
                return Ok(deleted);
            }
        }
    }

    /// Runs in the history and the bytes of their JSON.
    pub async fn run_totals(&self) -> Result<(u64, u64), Error> {
        let row = sqlx::query(
            "SELECT COUNT(*) AS n, CAST(COALESCE(SUM(bytes), 0) AS BIGINT) AS bytes FROM runs",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok((
            row.try_get::<i64, _>("n")?.max(0) as u64,
            row.try_get::<i64, _>("bytes")?.max(0) as u64,
        ))
    }

    pub async fn get_run(&self, id: &str) -> Result<Option<RunRecord>, Error> {
        let row = sqlx::query(
            "SELECT id, created_at, status, client, request, result FROM runs WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(run_record).transpose()
    }

    /// The newest `limit` runs, newest first.
    pub async fn recent_runs(&self, limit: i64) -> Result<Vec<RunRecord>, Error> {
        let rows = sqlx::query(
            "SELECT id, created_at, status, client, request, result FROM runs \
             ORDER BY created_us DESC, id DESC LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_record).collect()
    }

    pub async fn close(&self) {
        let waiting = self.backlog().waiting;
        if waiting > 0 {
            tracing::warn!(
                "{waiting} finished runs still wait for the database and are not stored"
            );
        }
        self.pool.close().await;
        // The backlog's writer sees the closed pool when woken.
        self.backlog.wake.notify_one();
    }
}

fn run_record(r: &AnyRow) -> Result<RunRecord, Error> {
    let json = |col: &str| -> Result<serde_json::Value, Error> {
        let text: String = r.try_get(col)?;
        Ok(serde_json::from_str(&text).unwrap_or(serde_json::Value::Null))
    };
    Ok(RunRecord {
        id: r.try_get("id")?,
        created_at: r.try_get("created_at")?,
        status: r.try_get("status")?,
        client: r.try_get("client")?,
        request: json("request")?,
        result: json("result")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn link_ids_are_content_hashes() {
        let a = link_id("fusion f {}", &json!({"M": 1, "N": 2}), 12);
        assert_eq!(a.len(), 12);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
        // Key order does not matter; content does.
        assert_eq!(a, link_id("fusion f {}", &json!({"N": 2, "M": 1}), 12));
        assert_ne!(a, link_id("fusion g {}", &json!({"M": 1, "N": 2}), 12));
        assert_ne!(a, link_id("fusion f {}", &json!({"M": 1, "N": 3}), 12));
        assert!(link_id("x", &json!(null), 51).starts_with(&link_id("x", &json!(null), 12)));
    }

    #[test]
    fn paths_become_sqlite_urls() {
        assert_eq!(database_url("/a/b.db"), "sqlite:///a/b.db?mode=rwc");
        assert_eq!(database_url("postgres://u@h/db"), "postgres://u@h/db");
    }

    #[tokio::test]
    async fn links_and_runs_round_trip() {
        let dir = std::env::temp_dir().join(format!("hopfuse-store-{}", std::process::id()));
        let db = dir.join("t.db").display().to_string();
        let _ = std::fs::remove_file(&db);
        round_trip(&db, "j1").await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn temp_db(name: &str) -> String {
        let dir = std::env::temp_dir().join(format!("hopfuse-store-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir.join("t.db").display().to_string()
    }

    async fn ids(store: &Store) -> Vec<String> {
        let mut ids: Vec<String> = store
            .recent_runs(1000)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        ids.sort();
        ids
    }

    /// Runs `r0..r9`, 100 s apart (r9 newest, 100 s old), each about `payload` bytes.
    async fn ten_runs(store: &Store, payload: usize) {
        let t = now_us();
        for i in 0..10 {
            store
                .insert_run(
                    &format!("r{i}"),
                    t - (1000 - 100 * i) * 1_000_000,
                    "passed",
                    "c",
                    &json!({"i": i}),
                    &json!({"pad": "x".repeat(payload)}),
                )
                .await
                .unwrap();
        }
    }

    #[tokio::test]
    async fn the_run_history_is_kept_within_the_count() {
        kept_within_the_count(&temp_db("count")).await;
    }

    async fn kept_within_the_count(db: &str) {
        let retention = Retention {
            max_runs: Some(3),
            ..Retention::UNBOUNDED
        };
        let store = Store::open(db, retention).await.unwrap();
        ten_runs(&store, 10).await;
        assert_eq!(store.prune_runs().await.unwrap(), Pruned { runs: 7 });
        assert_eq!(ids(&store).await, ["r7", "r8", "r9"]);
        // Enforced after inserts (3 kept: after every one), in the background.
        let passes = store.prune_passes();
        store
            .put_run("new", "passed", "c", &json!({}), &json!({}))
            .await
            .unwrap();
        pruned_after(&store, passes).await;
        assert_eq!(ids(&store).await, ["new", "r8", "r9"]);
        assert_eq!(store.run_totals().await.unwrap().0, 3);
        store.close().await;
    }

    /// Waits for the background pruning to finish a pass after the `passes` it had done.
    async fn pruned_after(store: &Store, passes: u64) {
        let start = std::time::Instant::now();
        while store.prune_passes() <= passes {
            assert!(start.elapsed() < Duration::from_secs(10), "no pruning pass");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Issue 39 item 10: storing a run does not prune (it read every row of the history on
    /// each insert past the count, about 40 ms a run at 10,000): the history grows past its
    /// count until `prune_every` inserts wake the background pass, which brings it back to the
    /// newest `max_runs`, deleting in batches.
    #[tokio::test]
    async fn the_history_is_pruned_in_the_background_every_few_inserts() {
        let retention = Retention {
            max_runs: Some(2500),
            ..Retention::UNBOUNDED
        };
        assert_eq!(retention.prune_every(), 25);
        let store = Store::open(&temp_db("background"), retention)
            .await
            .unwrap();
        // 3,500 older runs in one statement (SQLite's printf names them old00000...).
        sqlx::query(
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < $1 - 1) \
             INSERT INTO runs (id, created_at, created_us, status, client, request, result, \
             bytes) SELECT printf('old%05d', i), 0, $2 + i, 'passed', 'c', '{}', '{}', 4 FROM n",
        )
        .bind(2500 + PRUNE_BATCH)
        .bind(now_us() - 1_000_000_000)
        .execute(&store.pool)
        .await
        .unwrap();
        let passes = store.prune_passes();
        for i in 0..24 {
            store
                .put_run(&format!("new{i:02}"), "passed", "c", &json!({}), &json!({}))
                .await
                .unwrap();
        }
        // Not pruned on the way: every run is still there.
        assert_eq!(store.run_totals().await.unwrap().0, 2500 + 1000 + 24);
        assert_eq!(store.prune_passes(), passes);
        store
            .put_run("new24", "passed", "c", &json!({}), &json!({}))
            .await
            .unwrap();
        pruned_after(&store, passes).await;
        assert_eq!(store.run_totals().await.unwrap().0, 2500);
        let newest = store.recent_runs(1).await.unwrap();
        assert_eq!(newest[0].id, "new24");
        // The oldest kept: the 1,025 oldest went (more than one batch).
        let oldest: String = sqlx::query("SELECT id FROM runs ORDER BY created_us, id LIMIT 1")
            .fetch_one(&store.pool)
            .await
            .unwrap()
            .try_get("id")
            .unwrap();
        assert_eq!(oldest, "old01025");
        store.close().await;
    }

    #[tokio::test]
    async fn the_run_history_is_kept_within_the_bytes_and_the_age() {
        kept_within_the_bytes_and_the_age(&temp_db("bytes")).await;
    }

    async fn kept_within_the_bytes_and_the_age(db: &str) {
        let store = Store::open(db, Retention::UNBOUNDED).await.unwrap();
        ten_runs(&store, 1000).await;
        let (n, bytes) = store.run_totals().await.unwrap();
        assert_eq!(n, 10);
        assert!((10_000..11_000).contains(&bytes), "{bytes}");
        store.close().await;
        // Reopened with a policy: enforced at once. ~1 KB a run, 3.5 KB: the newest three.
        let retention = Retention {
            max_bytes: Some(3500),
            ..Retention::UNBOUNDED
        };
        let store = Store::open(db, retention).await.unwrap();
        assert_eq!(ids(&store).await, ["r7", "r8", "r9"]);
        store.close().await;
        // By age: runs created more than 250 s ago go (r7 is 300 s old, r8 200 s).
        let retention = Retention {
            max_age: Some(Duration::from_secs(250)),
            ..Retention::UNBOUNDED
        };
        let store = Store::open(db, retention).await.unwrap();
        assert_eq!(ids(&store).await, ["r8", "r9"]);
        // Links are never pruned.
        let link = store.put_link("p", &json!({}), "c").await.unwrap();
        store.prune_runs().await.unwrap();
        assert!(store.get_link(&link.id).await.unwrap().is_some());
        store.close().await;
    }

    /// Empties the run history (the PostgreSQL test database is shared by its tests).
    async fn clear_runs(db: &str) {
        let store = Store::open(db, Retention::UNBOUNDED).await.unwrap();
        sqlx::query("DELETE FROM runs")
            .execute(&store.pool)
            .await
            .unwrap();
        store.close().await;
    }

    /// A database made before the migrations (the tables without `bytes`) is migrated: its
    /// runs get their sizes and are kept.
    #[tokio::test]
    async fn a_database_from_before_the_migrations_is_migrated() {
        let db = temp_db("old");
        std::fs::create_dir_all(Path::new(&db).parent().unwrap()).unwrap();
        sqlx::any::install_default_drivers();
        let pool = AnyPoolOptions::new()
            .max_connections(1)
            .connect(&database_url(&db))
            .await
            .unwrap();
        // The schema as it was: the first migration's tables, without sqlx's bookkeeping.
        let old_schema: String = include_str!("../migrations/0001_init.sql")
            .lines()
            .filter(|l| !l.starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        for stmt in old_schema.split(';').filter(|s| !s.trim().is_empty()) {
            sqlx::query(sqlx::AssertSqlSafe(stmt.to_string()))
                .execute(&pool)
                .await
                .unwrap();
        }
        sqlx::query(
            "INSERT INTO runs (id, created_at, status, client, request, result) \
             VALUES ('old', 1, 'passed', 'c', '{}', '{\"b\":2}')",
        )
        .execute(&pool)
        .await
        .unwrap();
        pool.close().await;
        let store = Store::open(&db, Retention::UNBOUNDED).await.unwrap();
        let r = store.get_run("old").await.unwrap().unwrap();
        assert_eq!(r.result, json!({"b": 2}));
        assert_eq!(store.run_totals().await.unwrap(), (1, 9));
    }

    /// The same against PostgreSQL when `HOPFUSE_TEST_POSTGRES_URL` names a database (one
    /// the test may empty the run history of): round trip, migrations, retention.
    #[tokio::test]
    async fn postgres_round_trip_when_configured() {
        let Some(url) = crate::not_run::postgres_url("the store on PostgreSQL") else {
            return;
        };
        let job = format!("pg-{}-{}", std::process::id(), now());
        round_trip(&url, &job).await;
        clear_runs(&url).await;
        kept_within_the_count(&url).await;
        clear_runs(&url).await;
        kept_within_the_bytes_and_the_age(&url).await;
    }

    /// A PostgreSQL outage, on a cluster of this test's own (port 25439: below the ephemeral
    /// ports, which an outgoing connection could take while it is down; made and started by
    /// scripts/setup-distributed.sh, stopped and started again here): runs finished while it
    /// is down each return within the write timeout and wait in memory, the oldest is dropped
    /// past the backlog's limit (and counted), and the others are stored once it is back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_finished_during_a_postgres_outage_are_stored_after_it() {
        if crate::not_run::postgres_url("the run backlog across a PostgreSQL outage").is_none() {
            return;
        }
        let setup = |stop: bool| {
            let script =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/setup-distributed.sh");
            let mut cmd = std::process::Command::new("bash");
            cmd.arg(script).env("HOPFUSE_TEST_PG_PORT", "25439");
            if stop {
                cmd.arg("stop");
            }
            let out = cmd.output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        };
        let exports = setup(false);
        let url = exports
            .lines()
            .find_map(|l| l.strip_prefix("export HOPFUSE_TEST_POSTGRES_URL="))
            .unwrap()
            .to_string();
        clear_runs(&url).await;
        let store = Store::open(&url, Retention::UNBOUNDED)
            .await
            .unwrap()
            .with_backlog_limit(3);
        let put = |id: &'static str| {
            let store = store.clone();
            async move {
                let start = std::time::Instant::now();
                store
                    .put_run(id, "passed", "c", &json!({"id": id}), &json!({"ok": true}))
                    .await
                    .unwrap();
                start.elapsed()
            }
        };
        put("before").await;
        setup(true);
        for id in ["during-0", "during-1", "during-2", "during-3"] {
            let took = put(id).await;
            assert!(
                took < RUN_WRITE_TIMEOUT + Duration::from_secs(1),
                "{id}: {took:?}"
            );
        }
        let backlog = store.backlog();
        assert_eq!(
            (backlog.waiting, backlog.dropped, backlog.limit),
            (3, 1, 3),
            "{backlog:?}"
        );
        let before_the_wait = backlog.oldest_age_s.expect("runs wait");
        // Down for longer than sqlx's 30 s default acquire timeout would have waited per run.
        tokio::time::sleep(Duration::from_secs(3)).await;
        // The oldest waiting run (during-1) has waited through the sleep.
        let oldest = store.backlog().oldest_age_s.expect("runs wait");
        assert!(
            oldest >= before_the_wait + 3.0 && oldest < 30.0,
            "{before_the_wait} then {oldest}"
        );
        setup(false);
        let start = std::time::Instant::now();
        while store.backlog().waiting > 0 {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{:?}",
                store.backlog()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for id in ["before", "during-1", "during-2", "during-3"] {
            let run = store.get_run(id).await.unwrap();
            assert_eq!(run.map(|r| r.request), Some(json!({"id": id})), "{id}");
        }
        assert!(
            store.get_run("during-0").await.unwrap().is_none(),
            "dropped"
        );
        let drained = store.backlog();
        assert_eq!((drained.dropped, drained.oldest_age_s), (1, None));
        store.close().await;
    }

    async fn round_trip(db: &str, job: &str) {
        let store = Store::open(db, Retention::UNBOUNDED).await.unwrap();
        let l1 = store.put_link("p", &json!({"s": 1}), "c").await.unwrap();
        let l2 = store.put_link("p", &json!({"s": 1}), "c").await.unwrap();
        assert_eq!(l1.id, l2.id);
        let l3 = store.put_link("q", &json!({"s": 1}), "c").await.unwrap();
        assert_ne!(l1.id, l3.id);
        assert_eq!(store.get_link(&l1.id).await.unwrap().unwrap().program, "p");
        assert!(store.get_link("nope").await.unwrap().is_none());
        store
            .put_run(job, "ok", "127.0.0.1", &json!({"a": 1}), &json!({"b": 2}))
            .await
            .unwrap();
        // Stored once.
        store
            .put_run(job, "ok", "127.0.0.1", &json!({"a": 1}), &json!({"b": 3}))
            .await
            .unwrap();
        let r = store.get_run(job).await.unwrap().unwrap();
        assert_eq!(r.result, json!({"b": 2}));
        assert!(store
            .recent_runs(10)
            .await
            .unwrap()
            .iter()
            .any(|r| r.id == job));
        store.close().await;
        // Survives reopening.
        let store = Store::open(db, Retention::UNBOUNDED).await.unwrap();
        assert_eq!(store.get_link(&l1.id).await.unwrap().unwrap(), l1);
        store.close().await;
    }
}
