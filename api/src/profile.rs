//! The profile of a run as the runner reports it (`result.profile` of `hopfuse run --profile
//! --json` and of a service run with `"profile": true`, docs/api.md) and as the playground draws
//! it: the Nsight Compute metrics of the kernel's launch, its top warp stalls, and its roofline
//! point against the ceilings measured in the same worker process, with the roofline as SVG.
//!
//! Plain data and pure functions (serde and std only, no GPU, no runner types): the runner's
//! `profile/` fills it in and the playground (`web/src/profile_view.rs`) reads and draws the
//! same thing with the same code.
//!
//! The SVG is built from numbers and fixed words only (nothing from the program or ncu's text),
//! so the page may insert it as markup.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One warp-stall reason and how much it costs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stall {
    /// ncu's name of the reason (`long_scoreboard`, `barrier`, `wait`, ...).
    pub reason: String,
    /// In [`Profile::stall_unit`].
    pub value: f64,
}

/// The metrics of one profiled launch (None: this device or ncu did not report it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub kernel: String,
    /// The profiled launch's duration under ncu (clocks locked to base, caches flushed: longer
    /// than the run's median).
    pub duration_ns: Option<f64>,
    pub dram_throughput_pct: Option<f64>,
    /// Bytes read from and written to DRAM by the launch.
    pub dram_bytes: Option<f64>,
    pub l2_hit_rate_pct: Option<f64>,
    pub sm_throughput_pct: Option<f64>,
    /// The busiest tensor pipe, % of its peak while the SMs were active.
    pub tensor_pipe_pct: Option<f64>,
    pub achieved_occupancy_pct: Option<f64>,
    /// The top warp-stall reasons, largest first (`selected`, which is issuing, is not one).
    #[serde(default)]
    pub stalls: Vec<Stall>,
    /// What a stall's value counts, e.g. "warp cycles per issued instruction".
    #[serde(default)]
    pub stall_unit: String,
    /// Cycles between two issued instructions of a warp, all reasons together
    /// (`smsp__average_warp_latency_per_inst_issued.ratio`): the stalls' values add up to about
    /// this.
    #[serde(default)]
    pub warp_cycles_per_issued: Option<f64>,
    pub shared_bank_conflicts: Option<f64>,
    /// Floating-point operations the SASS executed (FP16/32/64 adds and multiplies, 2 per
    /// FMA); tensor-core work is not in it.
    pub flops: Option<f64>,
    /// Every metric of the launch, by ncu's name (base units).
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// ncu's version line.
    #[serde(default)]
    pub ncu: String,
}

/// Why a run has no profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unavailable {
    /// Nsight Compute is not installed where the worker runs.
    NoNcu,
    /// The GPU's performance counters are reserved to administrators (`ERR_NVGPUCTRPERM`).
    NoPermission,
    /// ncu ran past its time limit and was killed.
    TimedOut,
    /// ncu ran but profiled no launch of the kernel.
    NoKernel,
    /// Anything else ncu or its report said.
    Failed,
    /// The kernel never ran (the fake worker compiles and checks, and runs nothing), so there
    /// was no launch to profile.
    NotRun,
}

/// `result.profile`: the profile (`{"measured": {...}}`), or why there is none
/// (`{"unavailable": {"reason": ..., "message": ...}}`). Not having one never fails the run.
/// (Externally tagged, serde's default: an internally tagged enum costs the playground's wasm
/// serde's buffering deserializer.)
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfileReport {
    Measured {
        profile: Box<Profile>,
        /// None: `roofline_missing` says which number it lacks.
        roofline: Option<Roofline>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        roofline_missing: Option<String>,
    },
    Unavailable {
        reason: Unavailable,
        /// A sentence saying what is missing and how to get it.
        message: String,
    },
}

/// A roofline point and its ceilings, every rate per second.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Roofline {
    /// FLOP per DRAM byte.
    pub intensity: f64,
    /// Achieved FLOP/s: the FLOP count over the run's median time.
    pub flops_per_s: f64,
    /// Achieved DRAM bytes/s: ncu's DRAM bytes over the run's median time.
    pub bytes_per_s: f64,
    /// Where the FLOP count comes from: `plan` (2 M N K of a matrix product) or `sass` (ncu's
    /// count of executed floating-point instructions).
    #[serde(default)]
    pub flops_from: String,
    /// The measured device-to-device copy bandwidth (bytes/s): the slope of the memory roof.
    pub copy_bytes_per_s: f64,
    /// The measured cuBLAS FLOP/s: the tensor-core roof.
    pub tensor_flops_per_s: Option<f64>,
    /// What that roof is: the cuBLAS call (for a matrix product, on its own shape; otherwise a
    /// bf16 GEMM at 8192^3, the device's tensor-core speed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_ceiling: Option<String>,
}

/// Decades (powers of ten) spanned by a log axis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogAxis {
    pub lo: i32,
    pub hi: i32,
}

impl LogAxis {
    /// The smallest whole decades around `[min, max]`.
    fn around(min: f64, max: f64) -> LogAxis {
        let lo = min.log10().floor() as i32;
        let hi = (max.log10().ceil() as i32).max(lo + 1);
        LogAxis { lo, hi }
    }
    /// Where `v` falls, 0 at the lowest decade and 1 at the highest.
    fn at(&self, v: f64) -> f64 {
        (v.log10() - self.lo as f64) / (self.hi - self.lo) as f64
    }
    /// The decades, lowest first, as values.
    pub fn decades(&self) -> impl Iterator<Item = f64> {
        (self.lo..=self.hi).map(|d| 10f64.powi(d))
    }
    pub fn min(&self) -> f64 {
        10f64.powi(self.lo)
    }
    pub fn max(&self) -> f64 {
        10f64.powi(self.hi)
    }
}

/// Where the roofline picture puts things (SVG user units, y down).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Geometry {
    pub width: f64,
    pub height: f64,
    /// The plot area: left, top, right, bottom.
    pub plot: [f64; 4],
    pub x: LogAxis,
    pub y: LogAxis,
}

impl Geometry {
    pub fn sx(&self, intensity: f64) -> f64 {
        let [l, _, r, _] = self.plot;
        l + self.x.at(intensity) * (r - l)
    }
    pub fn sy(&self, flops_per_s: f64) -> f64 {
        let [_, t, _, b] = self.plot;
        b - self.y.at(flops_per_s) * (b - t)
    }
}

/// 1.5e12 -> "1.5 T" (for axis ticks and labels).
pub fn si(v: f64) -> String {
    const UNITS: [(f64, &str); 6] = [
        (1e15, "P"),
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "k"),
        (1.0, ""),
    ];
    for (scale, unit) in UNITS {
        if v.abs() >= scale {
            let x = v / scale;
            let digits = if x >= 100.0 {
                0
            } else if x >= 10.0 {
                1
            } else {
                2
            };
            let s = format!("{x:.digits$}");
            let s = if s.contains('.') {
                s.trim_end_matches('0').trim_end_matches('.').to_string()
            } else {
                s
            };
            return format!("{s} {unit}").trim_end().to_string();
        }
    }
    format!("{v:.2e}")
}

impl Roofline {
    /// The point of a profiled run: `flops` (the plan's 2 M N K for a matrix product, else the
    /// profile's SASS count), `seconds` the run's median time, the ceilings measured by the same
    /// worker. Err: which number is missing, in words.
    pub fn new(
        p: &Profile,
        plan_flops: Option<f64>,
        seconds: f64,
        copy_bytes_per_s: Option<f64>,
        tensor_flops_per_s: Option<f64>,
    ) -> Result<Roofline, String> {
        let (flops, flops_from) = match (plan_flops, p.flops) {
            (Some(f), _) => (f, "plan"),
            (None, Some(f)) => (f, "sass"),
            (None, None) => {
                return Err(
                    "no FLOP count: ncu reported no floating-point instruction counts".into(),
                )
            }
        };
        let Some(copy) = copy_bytes_per_s.filter(|c| *c > 0.0) else {
            return Err("no copy ceiling: the run measured none (ceilings off)".into());
        };
        let Some(bytes) = p.dram_bytes else {
            return Err("no DRAM byte count from ncu".into());
        };
        if bytes <= 0.0 {
            return Err("ncu counted no DRAM traffic (the data stayed in L2)".into());
        }
        if flops <= 0.0 {
            return Err(
                "the kernel executed no floating-point adds, multiplies or FMAs (FLOP = 0): \
                 there is no point to place on a FLOP/s axis"
                    .into(),
            );
        }
        if !(seconds > 0.0 && seconds.is_finite()) {
            return Err("no run time".into());
        }
        Ok(Roofline {
            intensity: flops / bytes,
            flops_per_s: flops / seconds,
            bytes_per_s: bytes / seconds,
            flops_from: flops_from.into(),
            copy_bytes_per_s: copy,
            tensor_flops_per_s: tensor_flops_per_s.filter(|t| *t > 0.0),
            tensor_ceiling: None,
        })
    }

    /// The intensity where the memory roof meets the tensor roof (FLOP per byte).
    pub fn ridge(&self) -> Option<f64> {
        self.tensor_flops_per_s.map(|t| t / self.copy_bytes_per_s)
    }

    /// The roof at an intensity: the copy bandwidth times it, capped by the tensor roof.
    pub fn roof(&self, intensity: f64) -> f64 {
        let memory = self.copy_bytes_per_s * intensity;
        self.tensor_flops_per_s.map_or(memory, |t| memory.min(t))
    }

    /// The achieved FLOP/s over the roof at the kernel's intensity.
    pub fn fraction_of_roof(&self) -> f64 {
        self.flops_per_s / self.roof(self.intensity)
    }

    /// The axes: two decades of intensity either side of the point (and the ridge), FLOP/s from
    /// below the point to above the highest roof drawn.
    pub fn geometry(&self) -> Geometry {
        let (lo_i, hi_i) = match self.ridge() {
            Some(r) => (self.intensity.min(r), self.intensity.max(r)),
            None => (self.intensity, self.intensity),
        };
        let x = LogAxis::around(lo_i / 100.0, hi_i * 100.0);
        let top = self.roof(x.max()).max(self.flops_per_s);
        let bottom = self.roof(x.min()).min(self.flops_per_s);
        let y = LogAxis::around(bottom, top * 1.5);
        Geometry {
            width: 560.0,
            height: 340.0,
            plot: [70.0, 16.0, 540.0, 290.0],
            x,
            y,
        }
    }

    /// The roofline as a log-log SVG: decade grid with labels, the memory roof (copy
    /// bandwidth), the tensor roof when measured, and the kernel's point. Colours are
    /// `currentColor` plus one accent, so it follows the page's theme.
    pub fn svg(&self) -> String {
        let g = self.geometry();
        let [l, t, r, b] = g.plot;
        let mut s = format!(
            "<svg class=\"roofline\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {h}\" \
             width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"roofline: achieved FLOP/s \
             against the measured ceilings\" font-family=\"sans-serif\" font-size=\"11\">",
            w = g.width,
            h = g.height
        );
        s.push_str(&format!(
            "<rect x=\"{l}\" y=\"{t}\" width=\"{}\" height=\"{}\" fill=\"none\" \
             stroke=\"currentColor\" stroke-opacity=\"0.4\"/>",
            r - l,
            b - t
        ));
        // Decade grid and tick labels.
        for v in g.x.decades() {
            let x = g.sx(v);
            s.push_str(&format!(
                "<line class=\"rl-grid\" x1=\"{x:.1}\" y1=\"{t}\" x2=\"{x:.1}\" y2=\"{b}\" \
                 stroke=\"currentColor\" stroke-opacity=\"0.12\"/>\
                 <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"currentColor\">{}</text>",
                b + 14.0,
                tick(v)
            ));
        }
        for v in g.y.decades() {
            let y = g.sy(v);
            s.push_str(&format!(
                "<line class=\"rl-grid\" x1=\"{l}\" y1=\"{y:.1}\" x2=\"{r}\" y2=\"{y:.1}\" \
                 stroke=\"currentColor\" stroke-opacity=\"0.12\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"currentColor\">{}</text>",
                l - 6.0,
                y + 4.0,
                si(v)
            ));
        }
        s.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"currentColor\">\
             arithmetic intensity (FLOP per DRAM byte)</text>\
             <text x=\"14\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"currentColor\" \
             transform=\"rotate(-90 14 {:.1})\">FLOP/s</text>",
            (l + r) / 2.0,
            g.height - 12.0,
            (t + b) / 2.0,
            (t + b) / 2.0
        ));
        // The roofs: the memory roof up to the ridge (or the edge), then the tensor roof.
        let (x_lo, x_hi) = (g.x.min(), g.x.max());
        let ridge = self.ridge().filter(|r| *r > x_lo && *r < x_hi);
        let mem_end = ridge.unwrap_or(x_hi);
        s.push_str(&format!(
            "<line class=\"rl-roof rl-memory\" x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" \
             stroke=\"currentColor\" stroke-width=\"2\"/>",
            g.sx(x_lo),
            g.sy(self.copy_bytes_per_s * x_lo),
            g.sx(mem_end),
            g.sy(self.copy_bytes_per_s * mem_end)
        ));
        // The memory roof's label, along its slope, a little way in: rotated by a matrix of the
        // slope's cosine and sine (no trigonometry, which would cost the page's wasm libm).
        let lx = x_lo * 2.5;
        let (dx, dy) = (
            g.sx(lx * 10.0) - g.sx(lx),
            g.sy(self.copy_bytes_per_s * lx * 10.0) - g.sy(self.copy_bytes_per_s * lx),
        );
        let len = (dx * dx + dy * dy).sqrt();
        let (c, sn) = (dx / len, dy / len);
        let (x, y) = (g.sx(lx), g.sy(self.copy_bytes_per_s * lx) - 6.0);
        s.push_str(&format!(
            "<text x=\"{x:.1}\" y=\"{y:.1}\" fill=\"currentColor\" \
             transform=\"matrix({c:.4} {sn:.4} {:.4} {c:.4} {:.2} {:.2})\">copy {}B/s (measured)</text>",
            -sn,
            x - c * x + sn * y,
            y - sn * x - c * y,
            si(self.copy_bytes_per_s),
        ));
        if let Some(tensor) = self.tensor_flops_per_s {
            let from = ridge.unwrap_or(x_lo).max(x_lo);
            s.push_str(&format!(
                "<line class=\"rl-roof rl-tensor\" x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{r}\" y2=\"{y:.1}\" \
                 stroke=\"currentColor\" stroke-width=\"2\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"currentColor\">\
                 cuBLAS {}FLOP/s (measured, tensor cores)</text>",
                g.sx(from),
                r - 4.0,
                g.sy(tensor) - 6.0,
                si(tensor),
                y = g.sy(tensor),
            ));
        }
        // The point, with its figures on the side that has room.
        let (px, py) = (g.sx(self.intensity), g.sy(self.flops_per_s));
        let right = px < (l + r) / 2.0;
        s.push_str(&format!(
            "<line class=\"rl-drop\" x1=\"{px:.1}\" y1=\"{py:.1}\" x2=\"{px:.1}\" y2=\"{b}\" \
             stroke=\"#e11d48\" stroke-dasharray=\"3 3\" stroke-opacity=\"0.6\"/>\
             <circle class=\"rl-point\" cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"5\" fill=\"#e11d48\"/>\
             <text class=\"rl-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{}\" fill=\"currentColor\">\
             <tspan font-weight=\"bold\">{}FLOP/s</tspan> at {} FLOP/B</text>\
             <text class=\"rl-label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{}\" fill=\"currentColor\">\
             {}B/s from DRAM · {:.0}% of the roof</text>",
            if right { px + 9.0 } else { px - 9.0 },
            py + 16.0,
            if right { "start" } else { "end" },
            si(self.flops_per_s),
            tick(self.intensity),
            if right { px + 9.0 } else { px - 9.0 },
            py + 30.0,
            if right { "start" } else { "end" },
            si(self.bytes_per_s),
            self.fraction_of_roof() * 100.0,
        ));
        s.push_str("</svg>");
        s
    }
}

/// An intensity as a short number: 0.001, 0.25, 12, 1e+05.
fn tick(v: f64) -> String {
    if !(1e-4..1e5).contains(&v) {
        return format!("{v:.0e}");
    }
    let digits = (2 - v.log10().floor() as i32).clamp(0, 6) as usize;
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}
