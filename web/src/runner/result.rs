//! A job's result (`api::job::JobResult` with its `api::run::RunResult`: the `done` event's data
//! or the answer of `GET /api/jobs/{id}`) read into a [`RunView`]; a result this playground
//! cannot read becomes an `error` view that names the field, never a quietly empty pane. A
//! `fake` result never yields numbers.

use super::fields::{Fields, Read};
use super::peers_profile::{peers, profile};
use super::view::{Check, Comparison, FakeView, Measured, RunView};
use serde_json::Value;

fn launch_text(l: Fields) -> Read<String> {
    let dims = |k: &str| -> Read<String> {
        let d = l.list(k)?;
        let n: Option<Vec<String>> = d
            .iter()
            .map(|x| x.as_u64().map(|n| n.to_string()))
            .collect();
        n.filter(|n| n.len() == 3)
            .map(|n| n.join(", "))
            .ok_or_else(|| format!("`{k}` is not three numbers"))
    };
    let mut t = format!("grid ({})  block ({})", dims("grid")?, dims("block")?);
    let smem = l.u64("dynamic_smem_bytes")?;
    if smem > 0 {
        t.push_str(&format!(
            "  {} dynamic shared memory",
            crate::model::bytes(smem as f64)
        ));
    }
    if l.opt("cluster", Value::as_array)?.is_some() {
        t.push_str(&format!("  cluster ({})", dims("cluster")?));
    }
    Ok(t)
}

/// One output's check (`api::run::Check`).
fn check(c: Fields) -> Read<Check> {
    Ok(Check {
        output: c.str("output")?.to_string(),
        passed: c.bool("passed")?,
        rel_l2: Some(c.f64("rel_l2")?),
        max_abs: Some(c.f64("max_abs")?),
        tolerance: Some(c.f64("tolerance")?),
        elements: Some(c.u64("elements")?),
        non_finite: c.u64("non_finite")?,
    })
}

fn checks(r: Fields, k: &str) -> Read<Vec<Check>> {
    r.list(k)?
        .iter()
        .map(|c| check(Fields::of(c, k)?))
        .collect()
}

/// `index_type` (`i32` | `i64`) and why.
fn index_text(r: Fields) -> Read<String> {
    let t = r.str("index_type")?;
    Ok(match r.str("index_reason")? {
        "" => t.to_string(),
        reason => format!("{t} ({reason})"),
    })
}

/// `l2_policy` (`api::run::L2Policy`, tagged by `kind`).
fn l2_text(p: Fields) -> Read<String> {
    Ok(match p.str("kind")? {
        "none" => "none (working set > 2x L2)".to_string(),
        "rotate" => format!("rotating {} copies of every tensor", p.u64("sets")?),
        "flush" => format!(
            "L2 flushed ({}) before each launch",
            crate::model::bytes(p.u64("bytes")? as f64)
        ),
        other => return Err(format!("unknown L2 policy `{other}`")),
    })
}

/// Reads a job's result: the data of the `done` event (an `api::job::JobEvent` with its result)
/// or the answer of `GET /api/jobs/{id}` (the `JobResult` itself, with `"done": true`).
pub fn parse_result(data: &str) -> RunView {
    let read = || -> Read<RunView> {
        let v: Value = serde_json::from_str(data).map_err(|e| e.to_string())?;
        let top = Fields::of(&v, "the answer")?;
        if top.0.contains_key("job_id") {
            return job_view(top);
        }
        match top.opt_obj("result")? {
            Some(job) => job_view(job),
            None => Err("the runner's done event holds no result".into()),
        }
    };
    read().unwrap_or_else(|e| RunView {
        status: "error".into(),
        error: Some(format!(
            "the runner's result is not one this playground reads ({e}): {data}"
        )),
        ..RunView::default()
    })
}

/// `comparison` of an A/B job (`api::job::Comparison`).
fn comparison(c: Fields) -> Read<Comparison> {
    let range = c.list("b_over_a_range")?;
    let range = match range {
        [lo, hi] => lo.as_f64().zip(hi.as_f64()),
        _ => None,
    };
    Ok(Comparison {
        median: c.f64("b_over_a_median")?,
        range: Some(range.ok_or("`b_over_a_range` is not two numbers")?),
        pairs: Some(c.u64("pairs")?),
        order: Some(c.str("order")?.to_string()),
        a_median_us: Some(c.f64("a_median_us")?),
        b_median_us: Some(c.f64("b_median_us")?),
        same_inputs: c.opt("same_inputs", Value::as_bool)?,
    })
}

impl Measured {
    /// `result` of a job (`api::run::RunResult`).
    fn of(r: Fields, cubin_cached: Option<bool>) -> Read<Measured> {
        let timing = r.obj("timing")?;
        let attributes = r.obj("attributes")?;
        let launch = r.obj("launch")?;
        let cublas = r.opt_obj("cublas")?;
        Ok(Measured {
            passed: r.bool("passed")?,
            device: Some(r.obj("device")?.str("name")?.to_string()),
            launch: Some(launch_text(launch)?),
            index: Some(index_text(r)?),
            l2_policy: Some(l2_text(r.obj("l2_policy")?)?),
            min_us: Some(timing.f64("min_us")?),
            median_us: Some(timing.f64("median_us")?),
            max_us: Some(timing.f64("max_us")?),
            samples: Some(timing.u64("samples")?),
            gbps: Some(r.f64("gbps")?),
            ceiling_gbps: r.opt_obj("copy")?.map(|c| c.f64("gbps")).transpose()?,
            ratio: r.opt_f64("fraction_of_copy")?,
            tflops: r.opt_f64("tflops")?,
            cublas_tflops: cublas.map(|c| c.f64("tflops")).transpose()?,
            cublas_ratio: r.opt_f64("fraction_of_cublas")?,
            cublas_call: cublas
                .map(|c| c.str("call").map(String::from))
                .transpose()?,
            cublas_check: cublas.map(|c| check(c.obj("validation")?)).transpose()?,
            cublas_skipped: r.opt_str("cublas_skipped")?,
            checks: checks(r, "validation")?,
            checks_after_timing: checks(r, "validation_after_timing")?,
            seed: Some(r.u64("seed")?),
            registers: Some(attributes.u64("registers_per_thread")? as i64),
            static_smem: Some(attributes.u64("static_smem_bytes")? as i64),
            dynamic_smem: Some(launch.u64("dynamic_smem_bytes")? as i64),
            local_bytes: Some(attributes.u64("local_bytes_per_thread")? as i64),
            nvrtc_ms: Some(r.f64("nvrtc_ms")?),
            cubin_cached,
            peers: r.opt_obj("peers")?.map(peers).transpose()?,
            profile: r.opt_obj("profile")?.map(profile).transpose()?,
        })
    }
}

/// One job result (A's, or `b` of an A/B job): `api::job::JobResult`.
fn job_view(job: Fields) -> Read<RunView> {
    let status = job.str("status")?;
    let fake = status == "fake";
    let error = job.opt_obj("error")?;
    let progress = job.list("progress")?;
    Ok(RunView {
        job_id: Some(job.str("job_id")?.to_string()),
        status: status.to_string(),
        message: job.opt_str("message")?,
        error_stage: error
            .map(|e| e.str("stage").map(String::from))
            .transpose()?,
        error: error
            .map(|e| e.str("message").map(String::from))
            .transpose()?,
        progress: progress
            .iter()
            .map(|p| {
                p.as_str()
                    .map(String::from)
                    .ok_or("`progress` is not names")
            })
            .collect::<Result<_, _>>()?,
        stderr: job.opt_str("stderr")?.filter(|e| !e.trim().is_empty()),
        // A fake result never shows numbers, whatever else it holds.
        measured: match job.opt_obj("result")? {
            Some(r) if !fake => Some(Measured::of(r, job.opt("cubin_cached", Value::as_bool)?)?),
            _ => None,
        },
        fake: match job.opt_obj("compile")? {
            Some(c) if fake => Some(FakeView {
                note: c.str("note")?.to_string(),
                kernel: Some(c.str("kernel")?.to_string()),
                index: Some(index_text(c)?),
                launch: Some(launch_text(c.obj("launch")?)?),
                working_set_bytes: Some(c.f64("working_set_bytes")?),
                cuda_bytes: Some(c.f64("cuda_bytes")?),
            }),
            _ => fake.then(FakeView::default),
        },
        worker_ms: Some(job.f64("worker_ms")?),
        agent: job.opt_str("agent")?,
        stages: Vec::new(),
        b: job.opt_obj("b")?.map(job_view).transpose()?.map(Box::new),
        comparison: job.opt_obj("comparison")?.map(comparison).transpose()?,
    })
}
