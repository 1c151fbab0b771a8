//! Sending a callback again (`POST /api/runs/<id>/callbacks/<delivery>/
//! redeliver`, the run page's Redeliver button), as a new attempt.
//!
//! A delivery that **failed** is spooled again as the same entry: same
//! `Delivery` id (Standard Webhooks' `webhook-id`, so a receiver that did
//! process it, answering too late, drops the repeat), same place in
//! `Callbacks`, its attempts kept and counted on, state back to `pending`.
//! A delivery that was **delivered** is sent again as a new entry appended
//! to `Callbacks`, with a new id: the receiver asked for it again, and under
//! the old id a receiver following the standard would drop it. Either way
//! the delivery then goes through the delivery threads like any other:
//! retries with backoff within `retry_for`, surviving restarts.

use std::collections::VecDeque;

use super::format::Message;
use super::{lock, payload, reported, Chain, Service};
use crate::http::ApiError;
use crate::state::delivery::{Delivery, DeliveryState};
use crate::state::spool::Pending;

impl Service {
    /// Spool delivery `delivery` of run `run` again (see the module docs)
    /// and hand it to the delivery threads; the id of the delivery sent.
    ///
    /// # Errors
    /// `run_not_found`; `delivery_not_found`; 409 `run_not_ended`
    /// ([`ApiError::DeliveryNotOver`]) while
    /// the delivery is still waiting or pending; `busy` when
    /// `max_pending` deliveries already wait; `storage_unavailable` when
    /// the delivery cannot be written.
    pub fn redeliver(&self, run: &str, delivery: &str) -> Result<String, ApiError> {
        let mut spooled: Option<Pending> = None;
        let mut refusal: Option<ApiError> = None;
        let updated = self.store.update(run, true, |rec| {
            let Some(index) = rec.callbacks.iter().position(|d| d.delivery == delivery) else {
                refusal = Some(ApiError::DeliveryNotFound);
                return false;
            };
            let d = &rec.callbacks[index];
            if !d.state.is_final() {
                refusal = Some(ApiError::DeliveryNotOver {
                    run: rec.run.clone(),
                    state: d.state.name(),
                });
                return false;
            }
            let index = if d.state == DeliveryState::Delivered {
                let mut new = d.clone();
                new.delivery = hex::encode(rand::random::<[u8; 16]>());
                (new.attempt_count, new.attempts) = (0, Vec::new());
                rec.callbacks.push(new);
                rec.callbacks.len() - 1
            } else {
                index
            };
            let outcome = reported(rec, &rec.callbacks[index]);
            let entry = &mut rec.callbacks[index];
            entry.state = DeliveryState::Pending;
            entry.error = None;
            // A skipped one has none yet: sent, it reports (in the record
            // and `Trigd-Outcome`) what it tells.
            entry.outcome = Some(outcome);
            // The exact message of its format, as first built (notify's
            // `Service::message`): a ping URL, a Slack text, the record.
            let d = rec.callbacks[index].clone();
            let msg = self.message(rec, &d, &payload(rec));
            match self.spool_again(&rec.run, index, d, msg) {
                Ok(p) => {
                    spooled = Some(p);
                    true
                }
                Err(e) => {
                    refusal = Some(e);
                    false
                }
            }
        });
        if let Some(e) = refusal {
            return Err(e);
        }
        match (updated, spooled) {
            (Ok(Some(_)), Some(p)) => {
                let id = p.delivery.delivery.clone();
                log::info!(
                    "run {run} callback {id} to {}: redelivery queued",
                    p.delivery.url
                );
                self.submit(Chain(VecDeque::from([p.seq])));
                Ok(id)
            }
            (Ok(None), _) => Err(ApiError::RunNotFound),
            (Err(e), Some(p)) => {
                // Not recorded: the spooled file must not be sent.
                self.forget(p.seq);
                Err(ApiError::storage(&e))
            }
            (_, None) => Err(ApiError::Internal),
        }
    }

    /// Write one pending delivery to the spool, counted in the backlog.
    fn spool_again(
        &self,
        run: &str,
        index: usize,
        delivery: Delivery,
        msg: Message,
    ) -> Result<Pending, ApiError> {
        let max = self.current().cb.max_pending;
        let seq = {
            let mut q = lock(&self.queue);
            if q.backlog >= max {
                return Err(ApiError::Busy {
                    retry_after: 5,
                    msg: format!(
                        "{max} callback deliveries are already waiting ([callbacks] max_pending); redeliver later."
                    ),
                });
            }
            q.backlog += 1;
            q.next_seq += 1;
            q.next_seq - 1
        };
        let p = Pending {
            seq,
            run: run.to_string(),
            index,
            first_attempt_ms: None,
            url: (msg.url != delivery.url).then_some(msg.url),
            delivery,
            body: msg.body,
        };
        if let Err(e) = self.spool.write(&p) {
            lock(&self.queue).backlog -= 1;
            return Err(ApiError::storage(&e));
        }
        Ok(p)
    }
}
