//! `welford(v)`: the variance `v` (a `var`, or `var_mean`'s first name) computed in one pass
//! over its operand, Welford's running (mean, m2, count) per thread, combined across threads
//! by Chan's formula, instead of the two passes the builder writes (the sum, then the squared
//! deviations from the mean).
//!
//! Takes the tensor the statement names; checks [`crate::fusion::welford::find`] (each refusal
//! names `v` as the user wrote it, located on the statement) and records the request on the
//! fusion ([`Fusion::welford`]) for `passes::welford`. Changes no loop, so it may come anywhere
//! in the schedule that leaves the variance's tensors as the builder made them.
//!
//! `online_logsumexp(lse)` likewise: the log-sum-exp `lse` in one pass, each thread's running
//! maximum and its sum of exponentials rescaled when the maximum grows, the threads' pairs
//! combined after the loop ([`crate::fusion::logsumexp::find`], [`Fusion::online_logsumexp`],
//! `passes::online_logsumexp`).

use super::*;

/// `welford(v)`.
pub(super) fn welford(f: &mut Fusion, a: &Args) -> SResult<()> {
    let (v, name, at) = a.tensor(f, "variance")?;
    crate::fusion::welford::find(f, v).or_else(|why| a.err(why, Some(at)))?;
    if f.welford.iter().any(|w| w.var == v) {
        return a.err(
            format!(
                "`{name}` is already computed by Welford's one pass (an earlier welford statement)"
            ),
            Some(at),
        );
    }
    f.welford.push(WelfordRewrite {
        var: v,
        span: Some(a.span),
    });
    Ok(())
}

/// `online_logsumexp(lse)`.
pub(super) fn online_logsumexp(f: &mut Fusion, a: &Args) -> SResult<()> {
    let (lse, name, at) = a.tensor(f, "logsumexp")?;
    crate::fusion::logsumexp::find(f, lse).or_else(|why| a.err(why, Some(at)))?;
    if f.online_logsumexp.iter().any(|r| r.lse == lse) {
        return a.err(
            format!(
                "`{name}` is already computed in one pass (an earlier online_logsumexp statement)"
            ),
            Some(at),
        );
    }
    f.online_logsumexp.push(LogSumExpRewrite {
        lse,
        span: Some(a.span),
    });
    Ok(())
}
