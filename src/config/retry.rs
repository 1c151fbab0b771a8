//! `[functions.retry]`: a run whose attempt ends in one of the chosen
//! outcomes is attempted again after a backoff, up to `attempts` in all
//! (the runner does it, `runner/mod.rs`; this module reads the table).

use std::time::Duration;

use toml::Spanned;

use super::raw::RawRetry;
use super::types::{duration, Errors, Src};

/// Most attempts a run may make.
pub const MAX_ATTEMPTS: i64 = 20;

/// The outcomes of an attempt that are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetryOn {
    /// A step failed or could not start.
    pub failed: bool,
    /// The run passed its timeout.
    pub timed_out: bool,
    /// trigd stopped while the attempt ran (retried at the next start).
    pub interrupted: bool,
}

/// How a function's runs are attempted again.
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    /// Attempts in all, the first included.
    pub attempts: u32,
    /// The first wait.
    pub backoff: Duration,
    /// Each wait doubles (else all are `backoff`).
    pub exponential: bool,
    /// The longest wait.
    pub max_backoff: Duration,
    /// Each wait is multiplied by a random factor from 0.8 to 1.2 (then
    /// capped), so that runs failing together do not retry together.
    pub jitter: bool,
    /// Which outcomes are retried.
    pub on: RetryOn,
    /// The run's callbacks are also sent after each attempt that is
    /// retried (`callbacks = "each"`), not only on the final outcome.
    pub each_attempt: bool,
}

impl Retry {
    /// The wait after attempt `n` (1-based) failed.
    pub fn wait(&self, n: u32) -> Duration {
        let base = if self.exponential {
            let doublings = n.saturating_sub(1).min(30);
            self.backoff.saturating_mul(1 << doublings)
        } else {
            self.backoff
        };
        let base = base.min(self.max_backoff);
        let waited = if self.jitter {
            base.mul_f64(rand::random_range(0.8..=1.2))
        } else {
            base
        };
        waited.min(self.max_backoff)
    }
}

/// Read `[functions.retry]` at `key`.
pub fn compile(src: &Src, raw: &Spanned<RawRetry>, key: &str, errs: &mut Errors) -> Retry {
    let r = raw.get_ref();
    let attempts = match &r.attempts {
        None => 3,
        Some(a) if (2..=MAX_ATTEMPTS).contains(a.get_ref()) => *a.get_ref() as u32,
        Some(a) => {
            let msg = format!(
                "attempts must be from 2 to {MAX_ATTEMPTS} (the first attempt included), got {}",
                a.get_ref()
            );
            errs.at(src, a.span(), format!("{key}.attempts"), msg);
            3
        }
    };
    let exponential = match &r.strategy {
        None => true,
        Some(s) => match s.get_ref().as_str() {
            "exponential" => true,
            "fixed" => false,
            other => {
                let msg = format!("strategy must be \"exponential\" or \"fixed\", got \"{other}\"");
                errs.at(src, s.span(), format!("{key}.strategy"), msg);
                true
            }
        },
    };
    let backoff = duration(
        src,
        r.backoff.as_ref(),
        &format!("{key}.backoff"),
        Duration::from_secs(10),
        errs,
    );
    let max_key = format!("{key}.max_backoff");
    let max_backoff = duration(
        src,
        r.max_backoff.as_ref(),
        &max_key,
        Duration::from_secs(600),
        errs,
    );
    if let Some(m) = &r.max_backoff {
        if max_backoff < backoff {
            errs.at(
                src,
                m.span(),
                &max_key,
                "max_backoff must not be shorter than backoff",
            );
        }
    }
    Retry {
        attempts,
        backoff,
        exponential,
        max_backoff: max_backoff.max(backoff),
        jitter: r.jitter.unwrap_or(true),
        on: outcomes(src, r.on.as_ref(), &format!("{key}.on"), errs),
        each_attempt: each_attempt(src, r.callbacks.as_ref(), key, errs),
    }
}

/// `callbacks`: whether every retried attempt sends the callbacks too.
fn each_attempt(src: &Src, v: Option<&Spanned<String>>, key: &str, errs: &mut Errors) -> bool {
    match v.map(|v| (v, v.get_ref().as_str())) {
        None | Some((_, "final")) => false,
        Some((_, "each")) => true,
        Some((v, other)) => {
            let msg = format!("callbacks must be \"final\" or \"each\", got \"{other}\"");
            errs.at(src, v.span(), format!("{key}.callbacks"), msg);
            false
        }
    }
}

/// The `on` list.
fn outcomes(
    src: &Src,
    on: Option<&Spanned<Vec<Spanned<String>>>>,
    key: &str,
    errs: &mut Errors,
) -> RetryOn {
    let Some(list) = on else {
        return RetryOn {
            failed: true,
            timed_out: true,
            interrupted: false,
        };
    };
    let mut out = RetryOn::default();
    for o in list.get_ref() {
        match o.get_ref().as_str() {
            "failed" => out.failed = true,
            "timed_out" => out.timed_out = true,
            "interrupted" => out.interrupted = true,
            other => {
                let msg = format!(
                    "on takes \"failed\", \"timed_out\" and \"interrupted\", got \"{other}\""
                );
                errs.at(src, o.span(), key, msg);
            }
        }
    }
    if out == RetryOn::default() && list.get_ref().is_empty() {
        errs.at(src, list.span(), key, "on must name at least one outcome");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_and_stay_within_the_cap() {
        let mut r = Retry {
            attempts: 5,
            backoff: Duration::from_secs(10),
            exponential: true,
            max_backoff: Duration::from_secs(35),
            jitter: false,
            on: RetryOn::default(),
            each_attempt: false,
        };
        let waits: Vec<u64> = (1..=5).map(|n| r.wait(n).as_secs()).collect();
        assert_eq!(waits, vec![10, 20, 35, 35, 35]);
        r.exponential = false;
        assert_eq!(r.wait(4), Duration::from_secs(10));
        r.jitter = true;
        r.exponential = true;
        for n in 1..=40 {
            let w = r.wait(n);
            assert!(
                w >= Duration::from_secs(8) && w <= Duration::from_secs(35),
                "{w:?}"
            );
        }
    }
}
