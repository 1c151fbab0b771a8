//! Idempotency claims in the database: made in the statement that records
//! the run (`runs.rs`), so a claim never exists without its run and a
//! run never without its claim (the durable unit, `state/mod.rs`).
//!
//! `runs::idempotency` asks for a claim before the run starts; with this
//! backend that costs no round trip: the claim waits here ([`Pending`]),
//! by run id, for the run's first write, which inserts both or neither.
//! When another request (on any instance) holds the key, the run is not
//! recorded and the claim is marked [`Outcome::Lost`] with the holder, so
//! the caller answers as a repeat of it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// A claim waiting for its run's first write.
#[derive(Debug, Clone)]
pub struct Claim {
    /// sha256 of caller and key, hex.
    pub key: String,
    /// sha256 of the request, hex.
    pub request: String,
    /// How long the claim holds (`idempotency_window`).
    pub window: Duration,
}

/// What became of a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Not written yet.
    Waiting,
    /// Written with its run.
    Made,
    /// Another request holds the key: its run, and its request's hash.
    Lost {
        /// The run the key stands for.
        run: String,
        /// sha256 of that request, hex.
        request: String,
    },
}

/// Claims by the run id they were made for.
#[derive(Debug, Default)]
pub struct Pending {
    map: Mutex<HashMap<String, (Claim, Outcome)>>,
}

impl Pending {
    /// Hold `claim` for run `run`'s first write.
    pub fn hold(&self, run: &str, claim: Claim) {
        self.lock()
            .insert(run.to_string(), (claim, Outcome::Waiting));
    }

    /// The claim run `run`'s first write must make, if one waits.
    pub fn waiting(&self, run: &str) -> Option<Claim> {
        self.lock()
            .get(run)
            .filter(|(_, o)| *o == Outcome::Waiting)
            .map(|(c, _)| c.clone())
    }

    /// Note what became of run `run`'s claim.
    pub fn settle(&self, run: &str, outcome: Outcome) {
        if let Some(e) = self.lock().get_mut(run) {
            e.1 = outcome;
        }
    }

    /// Forget run `run`'s claim (its request is answered), returning what
    /// became of it.
    pub fn take(&self, run: &str) -> Option<Outcome> {
        self.lock().remove(run).map(|(_, o)| o)
    }

    /// What became of run `run`'s claim, without forgetting it.
    pub fn outcome(&self, run: &str) -> Option<Outcome> {
        self.lock().get(run).map(|(_, o)| o.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Claim, Outcome)>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Give back the claim of run `run` (its request was refused after the
/// run was recorded, e.g. no slot came free): a retry may claim the key
/// anew. One statement.
pub fn give_back(
    client: &mut postgres::Client,
    key: &str,
    run: &str,
) -> Result<u64, postgres::Error> {
    use postgres::types::Type;
    client.execute_typed(
        "DELETE FROM trigd_idempotency WHERE key_hash = $1 AND run_id = $2",
        &[(&key, Type::TEXT), (&run, Type::TEXT)],
    )
}
