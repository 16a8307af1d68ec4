//! CUBINs by content. NVRTC runs once per distinct CUDA source (with the compile options and
//! NVRTC's version) per process, and once per machine through a disk cache: one
//! `<sha256>.cubin` file per source in [`dir`]. Sizes that lower to the same CUDA (most sizes
//! do: they are kernel parameters) share one CUBIN. A cache file that cannot be written costs
//! only a later compile; one that cannot be read is compiled again.

use crate::nvrtc::{self, NvrtcError};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Environment variable naming the cache directory.
pub const DIR_ENV: &str = "HOPFUSE_CACHE_DIR";

/// `$HOPFUSE_CACHE_DIR`, else `$XDG_CACHE_HOME/hopfuse/cubin`, else `~/.cache/hopfuse/cubin`;
/// `None` when none is set (then only the process keeps its CUBINs).
pub fn dir() -> Option<PathBuf> {
    let var = |v: &str| {
        std::env::var_os(v)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var(DIR_ENV)
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("hopfuse/cubin")))
        .or_else(|| var("HOME").map(|d| d.join(".cache/hopfuse/cubin")))
}

/// The cache key of a source compiled with `options` by NVRTC `version`.
pub fn key(source: &str, options: &[String], version: (i32, i32)) -> String {
    let mut h = Sha256::new();
    h.update(format!("nvrtc {}.{}\n", version.0, version.1));
    for o in options {
        h.update(o.as_bytes());
        h.update(b"\n");
    }
    h.update(source.as_bytes());
    h.finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
}

static MEMORY: Mutex<Option<HashMap<String, Arc<[u8]>>>> = Mutex::new(None);

/// The CUBIN of `source` (named `name` in NVRTC's messages): from this process, else from the
/// disk cache, else compiled by NVRTC (and stored in both).
pub fn cubin(source: &str, name: &str) -> Result<Arc<[u8]>, NvrtcError> {
    let include = nvrtc::include_dir()?;
    let key = key(
        source,
        &nvrtc::options(include.as_deref()),
        nvrtc::version()?,
    );
    cached(&key, dir().as_deref(), || {
        nvrtc::compile(source, name).map(|c| c.image)
    })
}

/// [`cubin`] with the key computed and the compile given.
fn cached(
    key: &str,
    dir: Option<&Path>,
    compile: impl FnOnce() -> Result<Vec<u8>, NvrtcError>,
) -> Result<Arc<[u8]>, NvrtcError> {
    let lookup = |key: &str| {
        let memory = MEMORY.lock().unwrap_or_else(|e| e.into_inner());
        memory.as_ref().and_then(|m| m.get(key).cloned())
    };
    if let Some(image) = lookup(key) {
        return Ok(image);
    }
    let file = dir.map(|d| d.join(format!("{key}.cubin")));
    let from_disk = file
        .as_ref()
        .and_then(|f| std::fs::read(f).ok())
        .filter(|image| !image.is_empty());
    let image: Arc<[u8]> = match from_disk {
        Some(image) => image.into(),
        None => {
            let image: Arc<[u8]> = compile()?.into();
            if let (Some(dir), Some(file)) = (dir, &file) {
                // Written aside and renamed: a reader never sees half a file.
                let part = dir.join(format!("{key}.{}.part", std::process::id()));
                let stored = std::fs::create_dir_all(dir)
                    .and_then(|_| std::fs::write(&part, &image))
                    .and_then(|_| std::fs::rename(&part, file));
                if stored.is_err() {
                    let _ = std::fs::remove_file(&part);
                }
            }
            image
        }
    };
    let mut memory = MEMORY.lock().unwrap_or_else(|e| e.into_inner());
    memory
        .get_or_insert_with(HashMap::new)
        .insert(key.to_string(), image.clone());
    Ok(image)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_change_with_the_source_options_and_version() {
        let opts = vec!["--gpu-architecture=sm_90a".to_string()];
        let k = key("a", &opts, (13, 0));
        assert_eq!(k.len(), 64);
        assert_ne!(k, key("b", &opts, (13, 0)));
        assert_ne!(k, key("a", &[], (13, 0)));
        assert_ne!(k, key("a", &opts, (13, 1)));
        assert_eq!(k, key("a", &opts, (13, 0)));
    }

    #[test]
    fn a_source_is_compiled_once_then_read_from_disk() {
        let dir = std::env::temp_dir().join(format!("hopfuse-cache-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let key = key("the source", &[], (0, std::process::id() as i32));
        let mut compiles = 0;
        let image = cached(&key, Some(&dir), || {
            compiles += 1;
            Ok(vec![1, 2, 3])
        })
        .unwrap();
        assert_eq!(&image[..], &[1, 2, 3]);
        let again = cached(&key, Some(&dir), || unreachable!("kept in memory")).unwrap();
        assert_eq!(&again[..], &[1, 2, 3]);
        assert_eq!(compiles, 1);
        assert_eq!(
            std::fs::read(dir.join(format!("{key}.cubin"))).unwrap(),
            [1, 2, 3]
        );
        // Another process (an empty memory) reads the file.
        MEMORY.lock().unwrap().as_mut().unwrap().remove(&key);
        let from_disk = cached(&key, Some(&dir), || unreachable!("on disk")).unwrap();
        assert_eq!(&from_disk[..], &[1, 2, 3]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
