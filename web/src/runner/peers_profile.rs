//! The parts of a measured result drawn by their own panes: `result.peers` (the torch twin timed
//! in the same run, `torch_pane.rs`) and `result.profile` (Nsight Compute's profile, built into
//! the runner's own `ProfileReport` so `profile_view.rs` draws it with the runner's code).

use super::fields::{Fields, Read};
use crate::torch_pane::{PeerView, PeersView};
use hopfuse_api as api;
use serde_json::Value;

/// `result.peers` (`api::run::PeersReport`): the torch twin timed in the same run.
pub(super) fn peers(p: Fields) -> Read<PeersView> {
    let peer = |q: &Value| -> Read<PeerView> {
        let q = Fields::of(q, "peers")?;
        let timing = q.opt_obj("timing")?;
        let t = |k: &str| timing.map(|t| t.f64(k)).transpose();
        Ok(PeerView {
            name: q.str("name")?.to_string(),
            median_us: t("median_us")?,
            min_us: t("min_us")?,
            max_us: t("max_us")?,
            passed: q.bool("passed")?,
            compile_s: q.opt_f64("compile_s")?,
            speedup: q.opt_f64("speedup")?,
            error: q.opt_str("error")?,
        })
    };
    Ok(PeersView {
        unavailable: p.opt_str("unavailable")?,
        torch: p.opt_str("torch")?,
        rounds: p.opt("rounds", Value::as_u64)?.filter(|&r| r > 0),
        peers: match p.opt("peers", Value::as_array)? {
            Some(list) => list.iter().map(peer).collect::<Read<_>>()?,
            None => Vec::new(),
        },
        best: p.opt_str("best")?,
        speedup: p.opt_f64("speedup")?,
        spread: p.opt_f64("speedup_min")?.zip(p.opt_f64("speedup_max")?),
    })
}

/// `result.peers` as a JSON value (the torch pane's tests).
#[cfg(test)]
pub(crate) fn read_peers(v: &Value) -> Read<PeersView> {
    peers(Fields::of(v, "peers")?)
}

/// `result.profile` (`api::profile::ProfileReport`, externally tagged), built into the runner's
/// own type: the Profile pane draws it with the runner's code (`profile_view.rs`).
pub(super) fn profile(p: Fields) -> Read<api::profile::ProfileReport> {
    use api::profile::{Profile, ProfileReport, Roofline, Stall, Unavailable};
    if let Some(u) = p.opt_obj("unavailable")? {
        let reason = match u.str("reason")? {
            "no_ncu" => Unavailable::NoNcu,
            "no_permission" => Unavailable::NoPermission,
            "timed_out" => Unavailable::TimedOut,
            "no_kernel" => Unavailable::NoKernel,
            "failed" => Unavailable::Failed,
            other => return Err(format!("unknown profile `reason` `{other}`")),
        };
        let message = u.str("message")?.to_string();
        return Ok(ProfileReport::Unavailable { reason, message });
    }
    let m = p.obj("measured")?;
    let f = m.obj("profile")?;
    let stalls = match f.opt("stalls", Value::as_array)? {
        Some(list) => list
            .iter()
            .map(|s| {
                let s = Fields::of(s, "stalls")?;
                Ok(Stall {
                    reason: s.str("reason")?.to_string(),
                    value: s.f64("value")?,
                })
            })
            .collect::<Read<_>>()?,
        None => Vec::new(),
    };
    let metrics = match f.opt_obj("metrics")? {
        Some(ms) => (ms.0.keys())
            .map(|k| Ok((k.clone(), ms.f64(k)?)))
            .collect::<Read<_>>()?,
        None => Default::default(),
    };
    let profile = Profile {
        kernel: f.str("kernel")?.to_string(),
        duration_ns: f.opt_f64("duration_ns")?,
        dram_throughput_pct: f.opt_f64("dram_throughput_pct")?,
        dram_bytes: f.opt_f64("dram_bytes")?,
        l2_hit_rate_pct: f.opt_f64("l2_hit_rate_pct")?,
        sm_throughput_pct: f.opt_f64("sm_throughput_pct")?,
        tensor_pipe_pct: f.opt_f64("tensor_pipe_pct")?,
        achieved_occupancy_pct: f.opt_f64("achieved_occupancy_pct")?,
        stalls,
        stall_unit: f.opt_str("stall_unit")?.unwrap_or_default(),
        warp_cycles_per_issued: f.opt_f64("warp_cycles_per_issued")?,
        shared_bank_conflicts: f.opt_f64("shared_bank_conflicts")?,
        flops: f.opt_f64("flops")?,
        metrics,
        ncu: f.opt_str("ncu")?.unwrap_or_default(),
    };
    let roofline = match m.opt_obj("roofline")? {
        Some(r) => Some(Roofline {
            intensity: r.f64("intensity")?,
            flops_per_s: r.f64("flops_per_s")?,
            bytes_per_s: r.f64("bytes_per_s")?,
            flops_from: r.opt_str("flops_from")?.unwrap_or_default(),
            copy_bytes_per_s: r.f64("copy_bytes_per_s")?,
            tensor_flops_per_s: r.opt_f64("tensor_flops_per_s")?,
            tensor_ceiling: r.opt_str("tensor_ceiling")?,
        }),
        None => None,
    };
    Ok(ProfileReport::Measured {
        profile: Box::new(profile),
        roofline,
        roofline_missing: m.opt_str("roofline_missing")?,
    })
}
