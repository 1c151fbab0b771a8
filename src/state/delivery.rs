//! The `Callbacks` member of a run record: one entry per callback URL of the
//! run, with its delivery id, its attempts and its state. Plain data, so
//! that the run log can hold it without knowing how deliveries work.

use serde::{Deserialize, Serialize};

use crate::state::time::Time;

/// Attempts kept in a record (the most recent ones); `AttemptCount` counts
/// them all.
pub const ATTEMPTS_KEPT: usize = 20;

/// Where a callback URL came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The function's `callback`.
    Function,
    /// The tool trigger's `callback`.
    Trigger,
    /// The request's `callback` parameter or `Trigd-Callback` header.
    Request,
}

impl Source {
    /// The snake_case name, as in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Source::Function => "function",
            Source::Trigger => "trigger",
            Source::Request => "request",
        }
    }
}

/// What a callback's body looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// The run record (JSON), as `GET /api/runs/<id>` shows it.
    #[default]
    Record,
    /// A Slack incoming webhook's JSON (`text`).
    Slack,
    /// A Discord webhook's JSON (`content`).
    Discord,
    /// An ntfy message: text body, `Title`, `Priority`, `Tags` headers.
    Ntfy,
    /// A healthchecks.io ping: `/start` at the start, `/<exit status>` or
    /// `/fail` at the end, `rid=` the run.
    Healthchecks,
}

impl Format {
    /// Whether this is the default (not written in records).
    pub fn is_record(&self) -> bool {
        *self == Format::Record
    }
}

/// An outcome a callback may be limited to (`on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The run succeeded.
    Finished,
    /// A step failed.
    Failed,
    /// The run outlasted its timeout.
    TimedOut,
    /// The run was cancelled.
    Cancelled,
    /// A shutdown or a crash cut the run off.
    Interrupted,
    /// The run succeeded and the function's previous ended run did not.
    Recovered,
    /// The function has had no success within its `expect_every`.
    Overdue,
}

impl Outcome {
    /// Every outcome, in the order the manual lists them.
    pub const ALL: [Outcome; 7] = [
        Outcome::Finished,
        Outcome::Failed,
        Outcome::TimedOut,
        Outcome::Cancelled,
        Outcome::Interrupted,
        Outcome::Recovered,
        Outcome::Overdue,
    ];

    /// The snake_case name, as in JSON and the config.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Finished => "finished",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
            Outcome::Cancelled => "cancelled",
            Outcome::Interrupted => "interrupted",
            Outcome::Recovered => "recovered",
            Outcome::Overdue => "overdue",
        }
    }
}

/// A callback URL of a run, known when the run is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The checked, normalised URL.
    pub url: String,
    /// Where it came from.
    pub source: Source,
    /// Its body's shape.
    pub format: Format,
    /// The outcomes it is sent for; empty: every end of a run.
    pub on: Vec<Outcome>,
}

/// How far a delivery got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// The run has not ended yet.
    Waiting,
    /// The run ended; the delivery is on disk, being attempted.
    Pending,
    /// A 2xx answer was received.
    Delivered,
    /// Given up: a 4xx answer (not 408/429), a refused address, the retry
    /// time used up, or no room in the backlog.
    Failed,
    /// Not sent: the run's outcome is not among the callback's `on`.
    Skipped,
}

impl DeliveryState {
    /// Whether nothing more will happen to the delivery.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            DeliveryState::Delivered | DeliveryState::Failed | DeliveryState::Skipped
        )
    }

    /// The snake_case name, as in JSON.
    pub fn name(self) -> &'static str {
        match self {
            DeliveryState::Waiting => "waiting",
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
            DeliveryState::Skipped => "skipped",
        }
    }
}

/// One attempt: when, and the HTTP status or the error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Attempt {
    /// When the attempt started.
    pub at: Time,
    /// The receiver's HTTP status, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// What went wrong, when it did not answer (or was not called).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How long the attempt took, in milliseconds.
    pub duration_ms: u64,
}

/// One callback of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Delivery {
    /// Delivery id (32 hex digits), sent as `Trigd-Delivery`; the same on
    /// every attempt, so a receiver can drop duplicates.
    pub delivery: String,
    /// The URL called.
    pub url: String,
    /// Where the URL came from.
    pub source: Source,
    /// How far it got.
    pub state: DeliveryState,
    /// Attempts made (all of them).
    #[serde(default)]
    pub attempt_count: u32,
    /// The last [`ATTEMPTS_KEPT`] attempts, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The body's shape (absent: the run record).
    #[serde(default, skip_serializing_if = "Format::is_record")]
    pub format: Format,
    /// The outcomes it is sent for (absent: every end).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on: Vec<Outcome>,
    /// What it reports, once the run ended (sent as `Trigd-Outcome`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
}

impl Delivery {
    /// A delivery for `target` with a new random id, waiting for the run to
    /// end.
    pub fn new(target: &Target) -> Delivery {
        Delivery {
            delivery: hex::encode(rand::random::<[u8; 16]>()),
            url: target.url.clone(),
            source: target.source,
            state: DeliveryState::Waiting,
            attempt_count: 0,
            attempts: Vec::new(),
            error: None,
            format: target.format,
            on: target.on.clone(),
            outcome: None,
        }
    }

    /// Note one more attempt, keeping only the newest [`ATTEMPTS_KEPT`].
    pub fn push_attempt(&mut self, a: Attempt) {
        self.attempt_count = self.attempt_count.saturating_add(1);
        self.attempts.push(a);
        if self.attempts.len() > ATTEMPTS_KEPT {
            let extra = self.attempts.len() - ATTEMPTS_KEPT;
            self.attempts.drain(..extra);
        }
    }
}

/// Take into `ours` (a writer's copy of a run's `Callbacks`) each entry
/// of `stored` (the kept record's) that the delivery service advanced
/// past it: the same delivery at the same place, final where ours is not,
/// or with more attempts. Whether any was taken.
pub fn keep_progress(ours: &mut [Delivery], stored: &[Delivery]) -> bool {
    let mut taken = false;
    for (mine, kept) in ours.iter_mut().zip(stored) {
        let further = kept.delivery == mine.delivery
            && ((kept.state.is_final() && !mine.state.is_final())
                || kept.attempt_count > mine.attempt_count);
        if further {
            mine.clone_from(kept);
            taken = true;
        }
    }
    taken
}

/// The deliveries of a run about to be accepted, one per target (equal URLs
/// once).
pub fn waiting(targets: &[Target]) -> Vec<Delivery> {
    let mut out: Vec<Delivery> = Vec::new();
    for t in targets {
        if !out.iter().any(|d| d.url == t.url) {
            out.push(Delivery::new(t));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_bounded_and_counted() {
        let t = Target {
            url: "https://a.example/".into(),
            source: Source::Function,
            format: Format::Record,
            on: Vec::new(),
        };
        let mut d = Delivery::new(&t);
        for i in 0..(ATTEMPTS_KEPT + 5) {
            d.push_attempt(Attempt {
                at: format!("2026-01-01T00:00:{i:02}.000Z").parse().unwrap(),
                status: Some(503),
                error: None,
                duration_ms: 1,
            });
        }
        assert_eq!(d.attempt_count as usize, ATTEMPTS_KEPT + 5);
        assert_eq!(d.attempts.len(), ATTEMPTS_KEPT);
        assert_eq!(d.attempts[0].at.to_string(), "2026-01-01T00:00:05.000Z");
        let two = waiting(&[t.clone(), t.clone()]);
        assert_eq!(two.len(), 1);
        assert_eq!(two[0].delivery.len(), 32);
        let json = serde_json::to_value(&two[0]).unwrap();
        assert_eq!(json["State"], "waiting");
        assert_eq!(json["Source"], "function");
    }

    #[test]
    fn progress_kept_in_the_record_is_not_undone() {
        let t = Target {
            url: "https://a.example/".into(),
            source: Source::Function,
            format: Format::Record,
            on: Vec::new(),
        };
        let mut pending = Delivery::new(&t);
        pending.state = DeliveryState::Pending;
        let waiting = Delivery::new(&t);
        let mut ours = vec![pending.clone(), waiting.clone()];
        let mut delivered = pending.clone();
        delivered.state = DeliveryState::Delivered;
        delivered.attempt_count = 1;
        // Another id at the same place is not the same delivery.
        let mut other = waiting.clone();
        other.delivery = "0".repeat(32);
        other.state = DeliveryState::Failed;
        assert!(keep_progress(&mut ours, &[delivered.clone(), other]));
        assert_eq!(ours, vec![delivered.clone(), waiting.clone()]);
        // Ours further along (just spooled): kept.
        let mut stored = vec![waiting.clone()];
        stored[0].state = DeliveryState::Waiting;
        let mut ours = vec![waiting.clone()];
        ours[0].state = DeliveryState::Pending;
        assert!(!keep_progress(&mut ours, &stored));
        assert_eq!(ours[0].state, DeliveryState::Pending);
    }
}
