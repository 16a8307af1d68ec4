//! The engine's hooks in a worker ([`WorkerHooks`]): progress steps as events on stdout, the
//! warm worker's torch peers, and CUBINs through the in-memory and on-disk caches (keyed by
//! SHA-256 of the NVRTC version, its options and the source; the directory kept bounded).

use super::{emit, WorkerEvent, MEMORY_CUBINS};
use crate::engine::{Hooks, Progress};
use crate::nvrtc;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub(super) struct WorkerHooks<'a, W: Write> {
    pub(super) out: &'a mut W,
    /// The warm worker's peer process (torch imported once for all its jobs).
    pub(super) peers: Option<&'a mut crate::peers::Peers>,
    pub(super) cache: Option<PathBuf>,
    /// A warm worker's in-memory CUBINs.
    pub(super) memory: Option<&'a mut HashMap<String, Vec<u8>>>,
    pub(super) cached: bool,
}

impl<W: Write> Hooks for WorkerHooks<'_, W> {
    fn progress(&mut self, step: Progress) {
        emit(self.out, &WorkerEvent::Progress { step });
    }

    fn peers(&mut self) -> Option<&mut crate::peers::Peers> {
        self.peers.as_deref_mut()
    }

    fn cubin(&mut self, cuda: &str, name: &str) -> Result<nvrtc::Cubin, nvrtc::NvrtcError> {
        let Some(dir) = self.cache.clone() else {
            return nvrtc::compile(cuda, name).and_then(|c| c.deny_warnings(name));
        };
        let start = Instant::now();
        let key = cubin_key(cuda)?;
        let path = dir.join(format!("{key}.cubin"));
        let from_memory = self.memory.as_ref().and_then(|m| m.get(&key).cloned());
        let (image, from) = match from_memory {
            Some(image) => (Some(image), "memory"),
            None => (std::fs::read(&path).ok().filter(|i| !i.is_empty()), "disk"),
        };
        if let Some(image) = image {
            self.cached = true;
            self.remember(&key, &image);
            emit(
                self.out,
                &WorkerEvent::CubinCached {
                    key,
                    from: from.into(),
                },
            );
            return Ok(nvrtc::Cubin {
                image,
                log: String::new(),
                warnings: Vec::new(),
                options: nvrtc::options(nvrtc::include_dir()?.as_deref()),
                compile_ms: start.elapsed().as_secs_f64() * 1e3,
            });
        }
        let cubin = nvrtc::compile(cuda, name).and_then(|c| c.deny_warnings(name))?;
        self.remember(&key, &cubin.image);
        // Best effort: a cache that cannot be written only costs the next run a compile.
        let _ = write_atomically(&dir, &path, &cubin.image);
        Ok(cubin)
    }
}

impl<W: Write> WorkerHooks<'_, W> {
    fn remember(&mut self, key: &str, image: &[u8]) {
        if let Some(m) = self.memory.as_mut() {
            if m.len() >= MEMORY_CUBINS && !m.contains_key(key) {
                m.clear();
            }
            m.insert(key.to_string(), image.to_vec());
        }
    }
}

/// The cache key of a CUDA source: SHA-256 of the NVRTC version, the options and the source.
pub fn cubin_key(cuda: &str) -> Result<String, nvrtc::NvrtcError> {
    let (major, minor) = nvrtc::version()?;
    let options = nvrtc::options(nvrtc::include_dir()?.as_deref());
    let mut h = Sha256::new();
    h.update(format!("nvrtc {major}.{minor}\n").as_bytes());
    for o in &options {
        h.update(o.as_bytes());
        h.update(b"\n");
    }
    h.update(b"\0");
    h.update(cuda.as_bytes());
    Ok(hex(&h.finalize()))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// CUBINs kept in the cache; past this the oldest half is removed.
const CACHE_ENTRIES: usize = 4096;

/// Writes a cache entry through a temporary file, first pruning the entries of its kind (its
/// extension) in `dir` when there are [`CACHE_ENTRIES`] of them.
pub(crate) fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    prune(dir, path.extension().unwrap_or_default());
    let tmp = dir.join(format!(".tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Keeps the cache directory bounded (oldest entries with extension `ext` go first).
fn prune(dir: &Path, ext: &std::ffi::OsStr) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == ext))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if files.len() < CACHE_ENTRIES {
        return;
    }
    files.sort();
    for (_, path) in files.iter().take(files.len() / 2) {
        let _ = std::fs::remove_file(path);
    }
}
