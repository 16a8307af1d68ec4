//! The service's storage: short links and run history, through sqlx's `Any` driver.
//!
//! SQLite by default (a file path or `sqlite://...` URL); a `postgres://...` URL works too: the
//! SQL here is the common subset (`$n` parameters, `TEXT`/`BIGINT`, `ON CONFLICT DO NOTHING`).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};
use std::path::Path;

#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
}

/// A stored short link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub id: String,
    pub program: String,
    /// Whatever the playground wants to restore (sizes, options, open panes), as JSON.
    pub state: serde_json::Value,
    /// Seconds since the Unix epoch.
    pub created_at: i64,
}

/// One finished job in the run history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: String,
    pub created_at: i64,
    pub status: String,
    pub client: String,
    pub request: serde_json::Value,
    pub result: serde_json::Value,
}

pub type Error = sqlx::Error;

/// The database URL for `--db`: a URL as it is, a path as a SQLite file created when missing.
pub fn database_url(db: &str) -> String {
    if db.contains("://") || db.starts_with("sqlite:") {
        db.to_string()
    } else {
        format!("sqlite://{db}?mode=rwc")
    }
}

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS links (
        id TEXT PRIMARY KEY,
        program TEXT NOT NULL,
        state TEXT NOT NULL,
        created_at BIGINT NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY,
        created_at BIGINT NOT NULL,
        status TEXT NOT NULL,
        client TEXT NOT NULL,
        request TEXT NOT NULL,
        result TEXT NOT NULL
    )",
    "CREATE INDEX IF NOT EXISTS runs_created_at ON runs (created_at)",
];

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
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
    /// Connects (creating a SQLite file and its directory when needed) and creates the tables.
    pub async fn open(db: &str) -> Result<Store, Error> {
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
        let pool = AnyPoolOptions::new()
            // SQLite has one writer; more connections only contend for its lock.
            .max_connections(if sqlite { 1 } else { 8 })
            .connect(&url)
            .await?;
        for stmt in SCHEMA {
            sqlx::query(*stmt).execute(&pool).await?;
        }
        Ok(Store { pool })
    }

    /// Stores a link and returns its id; the same program and state always get the same id.
    pub async fn put_link(&self, program: &str, state: &serde_json::Value) -> Result<Link, Error> {
        let state_text = serde_json::to_string(state).expect("JSON values serialize");
        for len in ID_LENGTHS {
            let id = link_id(program, state, len);
            sqlx::query(
                "INSERT INTO links (id, program, state, created_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (id) DO NOTHING",
            )
            .bind(&id)
            .bind(program)
            .bind(&state_text)
            .bind(now())
            .execute(&self.pool)
            .await?;
            let link = self.get_link(&id).await?.ok_or(Error::RowNotFound)?;
            if link.program == program && &link.state == state {
                return Ok(link);
            }
        }
        Err(Error::Protocol(
            "link id collision at every length".to_string(),
        ))
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

    /// Adds a finished job to the run history (a job id is stored once).
    pub async fn put_run(
        &self,
        id: &str,
        status: &str,
        client: &str,
        request: &serde_json::Value,
        result: &serde_json::Value,
    ) -> Result<(), Error> {
        sqlx::query(
            "INSERT INTO runs (id, created_at, status, client, request, result) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING",
        )
        .bind(id)
        .bind(now())
        .bind(status)
        .bind(client)
        .bind(serde_json::to_string(request).expect("JSON values serialize"))
        .bind(serde_json::to_string(result).expect("JSON values serialize"))
        .execute(&self.pool)
        .await?;
        Ok(())
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
             ORDER BY created_at DESC, id DESC LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_record).collect()
    }

    pub async fn close(&self) {
        self.pool.close().await;
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

    /// The same against PostgreSQL when `HOPFUSE_TEST_POSTGRES_URL` names a database.
    #[tokio::test]
    async fn postgres_round_trip_when_configured() {
        let Some(url) = crate::not_run::postgres_url("the store on PostgreSQL") else {
            return;
        };
        let job = format!("pg-{}-{}", std::process::id(), now());
        round_trip(&url, &job).await;
    }

    async fn round_trip(db: &str, job: &str) {
        let store = Store::open(db).await.unwrap();
        let l1 = store.put_link("p", &json!({"s": 1})).await.unwrap();
        let l2 = store.put_link("p", &json!({"s": 1})).await.unwrap();
        assert_eq!(l1.id, l2.id);
        let l3 = store.put_link("q", &json!({"s": 1})).await.unwrap();
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
        let store = Store::open(db).await.unwrap();
        assert_eq!(store.get_link(&l1.id).await.unwrap().unwrap(), l1);
        store.close().await;
    }
}
