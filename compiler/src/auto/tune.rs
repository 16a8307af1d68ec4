//! The tuner's search space: the parameters a scheduler decides ([`Knobs`]) and the candidate
//! schedules of a fusion ([`candidates`]), each written by the fusion's scheduler with some of
//! its choices overridden.
//!
//! Takes the unscheduled fusion and the sizes, as [`super::choose`] does. Guarantees: the first
//! candidate is the scheduler's own choice (what a program without a schedule compiles with);
//! the rest are distinct schedule texts the scheduler wrote for other values of its parameters,
//! at most [`MAX_CANDIDATES`] in all, each within the limits the scheduler checks itself (a
//! row kept in registers within the register file, a block within 1024 threads; a product's
//! stages are bounded by shared memory, which the lowering checks: such a candidate is refused
//! when compiled, with the shared memory it needs). Whether a
//! candidate compiles, fits the SM and is faster is for the runner's `hopfuse tune` to find out
//! (it compiles, validates and times each on the GPU). Cheap: no lowering here.

use super::{choose_with, AutoSchedule, Class, Declined, Sizes};
use crate::fusion::{Fusion, L2Policy};

/// Most candidates one fusion gets (the default included): a tune run validates and times
/// each on the GPU, so the search stays within a minute for the bench sizes.
pub const MAX_CANDIDATES: usize = 16;

/// Where a normalization keeps its row (the persistent buffer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowPlacement {
    Registers,
    Shared,
    Streamed,
}

impl RowPlacement {
    pub fn name(self) -> &'static str {
        match self {
            RowPlacement::Registers => "registers",
            RowPlacement::Shared => "shared",
            RowPlacement::Streamed => "streamed",
        }
    }
}

/// Parameters set in place of a scheduler's own choice; `None` keeps the choice. A value a
/// scheduler cannot use (a vector wider than the rows' alignment allows, a row too wide for
/// the registers asked for) is bounded or declined by the scheduler, never taken blindly.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Knobs {
    /// Threads across the axis the scheduler spreads over threads: per block (pointwise), per
    /// row (inner reduction, a normalization row kept in shared memory or streamed), across a
    /// strip's columns (outer reduction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<i64>,
    /// Vectors each thread takes: unrolled vectors (pointwise), vectors of a row kept in
    /// registers (normalization), rows per unrolled step (outer reduction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_thread: Option<i64>,
    /// Elements per vector access, at most what the alignment allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector: Option<i64>,
    /// Where a normalization's row lives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row: Option<RowPlacement>,
    /// A product's pipeline stages (the operands' circular buffers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<i64>,
    /// A persistent product's raster group (M tiles walked together, for L2 reuse).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raster: Option<i64>,
    /// The L2 policy of the inputs a pointwise or normalization schedule caches, in place of
    /// the rule of `auto/l2.rs` (plain loads or `evict_last`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2: Option<L2Policy>,
}

impl Knobs {
    /// `threads=256 per_thread=2`, or `default` when nothing is overridden.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(r) = self.row {
            parts.push(format!("row={}", r.name()));
        }
        if let Some(t) = self.threads {
            parts.push(format!("threads={t}"));
        }
        if let Some(k) = self.per_thread {
            parts.push(format!("per_thread={k}"));
        }
        if let Some(v) = self.vector {
            parts.push(format!("vector={v}"));
        }
        if let Some(n) = self.stages {
            parts.push(format!("stages={n}"));
        }
        if let Some(g) = self.raster {
            parts.push(format!("raster={g}"));
        }
        if let Some(p) = self.l2 {
            parts.push(format!("l2={}", p.name()));
        }
        if parts.is_empty() {
            "default".to_string()
        } else {
            parts.join(" ")
        }
    }
}

/// One schedule the tuner tries: the parameters set and what the scheduler wrote with them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Candidate {
    pub knobs: Knobs,
    pub schedule: AutoSchedule,
}

/// The candidate schedules of `fusion` for `sizes`: the scheduler's own choice first, then the
/// distinct schedules of the other parameter values of its class. Declined as [`super::choose`]
/// declines (no scheduler takes the fusion).
pub fn candidates(fusion: &Fusion, sizes: &Sizes) -> Result<Vec<Candidate>, Declined> {
    let own = choose_with(fusion, sizes, &Knobs::default())?;
    let class = super::classify(fusion).map_err(|reason| Declined {
        class: None,
        reason,
    })?;
    let mut out = vec![Candidate {
        knobs: Knobs::default(),
        schedule: own,
    }];
    for knobs in space(&class) {
        if out.len() == MAX_CANDIDATES {
            break;
        }
        let Ok(schedule) = choose_with(fusion, sizes, &knobs) else {
            continue;
        };
        if out.iter().all(|c| c.schedule.text != schedule.text) {
            out.push(Candidate { knobs, schedule });
        }
    }
    Ok(out)
}

/// The parameter values tried for `class`, most promising first (the list is cut at
/// [`MAX_CANDIDATES`]).
fn space(class: &Class) -> Vec<Knobs> {
    let mut out = Vec::new();
    // The inputs' L2 policy flipped from the rule's choice (the one equal to it repeats the
    // default's text and is dropped): where the H200 measured either way, first.
    if matches!(class, Class::Pointwise { .. } | Class::Normalization { .. }) {
        for l2 in [L2Policy::EvictLast, L2Policy::Normal] {
            out.push(Knobs {
                l2: Some(l2),
                ..Knobs::default()
            });
        }
    }
    match class {
        Class::Pointwise { .. } => {
            for per_thread in [1, 2, 4] {
                for threads in [128, 256, 512, 64] {
                    out.push(Knobs {
                        threads: Some(threads),
                        per_thread: Some(per_thread),
                        ..Knobs::default()
                    });
                }
            }
        }
        // One kernel (the hand schedules' best): nothing to enumerate yet.
        Class::Transpose { .. } | Class::Attention(_) => {}
        // Stages within shared memory (a 128 x 256 tile's stage is 48 KiB; a decode tile's
        // 24 KiB), raster groups around the default 16. A value that does not fit is refused
        // when the candidate compiles.
        Class::MatrixProduct(..) => {
            for stages in [4, 2, 3, 6, 8] {
                out.push(Knobs {
                    stages: Some(stages),
                    ..Knobs::default()
                });
            }
            for raster in [8, 32, 4] {
                out.push(Knobs {
                    raster: Some(raster),
                    ..Knobs::default()
                });
            }
        }
        Class::InnerReduction { .. } => {
            for threads in [128, 256, 512, 64, 1024, 32] {
                out.push(Knobs {
                    threads: Some(threads),
                    ..Knobs::default()
                });
            }
        }
        Class::FullReduction { .. } => {
            for threads in [256, 512, 128] {
                for per_thread in [4, 2, 8] {
                    out.push(Knobs {
                        threads: Some(threads),
                        per_thread: Some(per_thread),
                        ..Knobs::default()
                    });
                }
            }
        }
        Class::OuterReduction { .. } => {
            for threads in [32, 16, 8, 4] {
                for per_thread in [4, 2, 8] {
                    out.push(Knobs {
                        threads: Some(threads),
                        per_thread: Some(per_thread),
                        ..Knobs::default()
                    });
                }
            }
        }
        Class::Normalization { .. } => {
            for per_thread in [1, 2, 4, 8, 16] {
                out.push(Knobs {
                    row: Some(RowPlacement::Registers),
                    per_thread: Some(per_thread),
                    ..Knobs::default()
                });
            }
            for threads in [256, 512, 1024] {
                out.push(Knobs {
                    row: Some(RowPlacement::Shared),
                    threads: Some(threads),
                    ..Knobs::default()
                });
            }
            for threads in [256, 128, 512] {
                out.push(Knobs {
                    row: Some(RowPlacement::Streamed),
                    threads: Some(threads),
                    ..Knobs::default()
                });
            }
        }
    }
    out
}
