//! `result.peers` (`api::run::PeersReport`: the torch twin timed in the same run) made into the
//! torch pane's view (`torch_pane.rs`). `result.profile` needs no view of its own: the Profile
//! pane draws the runner's `api::profile::ProfileReport` with the runner's code
//! (`profile_view.rs`).

use crate::torch_pane::{PeerView, PeersView};
use hopfuse_api::run::{PeerResult, PeersReport};

impl From<&PeerResult> for PeerView {
    fn from(q: &PeerResult) -> PeerView {
        let t = |f: fn(&hopfuse_api::run::Timing) -> f64| q.timing.as_ref().map(f);
        PeerView {
            name: q.name.clone(),
            median_us: t(|t| t.median_us),
            min_us: t(|t| t.min_us),
            max_us: t(|t| t.max_us),
            passed: q.passed,
            compile_s: q.compile_s,
            speedup: q.speedup,
            error: q.error.clone(),
        }
    }
}

impl From<&PeersReport> for PeersView {
    fn from(p: &PeersReport) -> PeersView {
        PeersView {
            unavailable: p.unavailable.clone(),
            torch: p.torch.clone(),
            // No rounds: the twin was not timed (unavailable, or no peer ran).
            rounds: Some(u64::from(p.rounds)).filter(|&r| r > 0),
            peers: p.peers.iter().map(PeerView::from).collect(),
            best: p.best.clone(),
            speedup: p.speedup,
            spread: p.speedup_min.zip(p.speedup_max),
        }
    }
}
