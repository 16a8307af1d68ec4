//! Per-client request rates for the service: a keyed GCRA limiter from `governor` (one state
//! per client key, `per_minute` requests with bursts of up to `per_minute`), answering when a
//! refused client may try again (the service's 429 + `Retry-After`).

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use std::num::NonZeroU32;

/// Clients remembered before the limiter forgets the ones whose state is back to full.
const KEYS_BEFORE_CLEANUP: usize = 10_000;

pub struct ClientRateLimiter {
    per_minute: u32,
    /// `None`: no limit (`per_minute` = 0).
    limiter: Option<DefaultKeyedRateLimiter<String>>,
}

impl ClientRateLimiter {
    pub fn new(per_minute: u32) -> ClientRateLimiter {
        ClientRateLimiter {
            per_minute,
            limiter: NonZeroU32::new(per_minute)
                .map(|n| DefaultKeyedRateLimiter::keyed(Quota::per_minute(n))),
        }
    }

    pub fn per_minute(&self) -> u32 {
        self.per_minute
    }

    /// Counts one request of `client`, or says in how many whole seconds (at least 1) it may
    /// be made.
    pub fn check(&self, client: &str) -> Result<(), u64> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        if limiter.len() > KEYS_BEFORE_CLEANUP {
            limiter.retain_recent();
        }
        limiter.check_key(&client.to_string()).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            (wait.as_secs_f64().ceil() as u64).max(1)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_per_minute_then_a_wait_per_client() {
        let l = ClientRateLimiter::new(3);
        for _ in 0..3 {
            l.check("a").unwrap();
        }
        let wait = l.check("a").unwrap_err();
        // One request per 20 s comes back.
        assert!((1..=20).contains(&wait), "{wait}");
        // Another client has its own budget.
        l.check("b").unwrap();
    }

    #[test]
    fn zero_means_no_limit() {
        let l = ClientRateLimiter::new(0);
        for _ in 0..1000 {
            l.check("a").unwrap();
        }
    }
}
