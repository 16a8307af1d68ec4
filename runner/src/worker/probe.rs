//! What GPU a host has, asked of a child process (`hopfuse worker --probe`, so a broken driver
//! cannot take the service or the agent down with it): [`probe_in_child`] gives the
//! [`GpuStatus`] that [`probe`], the child's side, prints; `hopfuse serve` and `hopfuse agent`
//! run one worker on each GPU it saw unless `--gpus` says otherwise
//! ([`GpuStatus::gpus_to_use`]).

use crate::gpu::{DeviceInfo, Gpu};
use crate::nvrtc;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What the startup probe found.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GpuStatus {
    pub gpu: Option<DeviceInfo>,
    pub reason: Option<String>,
    pub nvrtc: Option<String>,
    /// Why NVRTC cannot be loaded (runs need it as much as the GPU).
    #[serde(default)]
    pub nvrtc_reason: Option<String>,
    /// The GPUs the probe saw (0: none, or not probed).
    #[serde(default)]
    pub gpus: usize,
}

impl GpuStatus {
    /// The GPUs to run on: `--gpus` when given, else every GPU the probe saw (at least one
    /// worker, which reports why it cannot run when there is no GPU).
    pub fn gpus_to_use(&self, asked: Option<usize>) -> usize {
        asked.unwrap_or(self.gpus).max(1)
    }
}

/// `hopfuse worker --probe`: the GPU the service would run on, as JSON on stdout, or why none.
pub fn probe() -> i32 {
    let (nvrtc, nvrtc_reason) = match nvrtc::version() {
        Ok((major, minor)) => (Some(format!("{major}.{minor}")), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let probe = match Gpu::open() {
        Ok(gpu) => GpuStatus {
            gpu: Some(gpu.info.clone()),
            reason: None,
            nvrtc,
            nvrtc_reason,
            gpus: crate::gpu::visible_count().max(1),
        },
        Err(e) => GpuStatus {
            gpu: None,
            reason: Some(e.to_string()),
            nvrtc,
            nvrtc_reason,
            gpus: 0,
        },
    };
    println!(
        "{}",
        serde_json::to_string(&probe).expect("probe serializes")
    );
    0
}

/// Asks a `hopfuse worker --probe` child which GPU there is (a broken driver cannot take the
/// server down with it).
pub async fn probe_in_child(worker_exe: &std::path::Path) -> GpuStatus {
    let failed = |reason: String| GpuStatus {
        gpu: None,
        reason: Some(reason),
        nvrtc: None,
        nvrtc_reason: None,
        gpus: 0,
    };
    let out = tokio::process::Command::new(worker_exe)
        .args(["worker", "--probe"])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(Duration::from_secs(30), out).await {
        Err(_) => failed("the GPU probe did not finish in 30 s".into()),
        Ok(Err(e)) => failed(format!("cannot start the GPU probe: {e}")),
        Ok(Ok(o)) => {
            let text = String::from_utf8_lossy(&o.stdout);
            match serde_json::from_str::<GpuStatus>(text.trim()) {
                Ok(s) => s,
                Err(_) => failed(format!(
                    "the GPU probe failed ({}): {}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr).trim()
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::GpuStatus;

    /// Issue 39 item 14: without `--gpus` the service ran one worker on a host with several
    /// GPUs; it now runs one on each GPU the probe saw.
    #[test]
    fn every_visible_gpu_is_used_unless_gpus_says_otherwise() {
        let probed = |gpus| GpuStatus {
            gpu: None,
            reason: None,
            nvrtc: None,
            nvrtc_reason: None,
            gpus,
        };
        assert_eq!(probed(2).gpus_to_use(None), 2);
        assert_eq!(probed(8).gpus_to_use(Some(3)), 3);
        assert_eq!(probed(0).gpus_to_use(None), 1);
        assert_eq!(probed(0).gpus_to_use(Some(2)), 2);
    }
}
