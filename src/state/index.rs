//! The run log's index in memory: for every kept run, where its latest line
//! sits and what a list filters on, in 48 bytes, plus a 4-byte position in
//! a hash table to find it by id (about 59 bytes a run at 1,000,000 runs,
//! measured by `index_stays_under_64_bytes_a_run`).
//!
//! The runs are kept sorted by their list order, (`CreatedAt` in ms, the
//! id's 16 bytes), oldest first, so that a page of `GET /api/runs` starts
//! at a binary search (the cursor, `until`) and stops at one (`since`).
//! What a run's program, function and tool are is interned: a run holds a
//! 4-byte number for the three, and one for its origin; a filter on them is
//! decided once per distinct value, not once per run.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};

use hashbrown::HashTable;

use super::record::{Owner, RunRecord, RunState};
use super::store::{Cursor, OriginFilter, RunFilter, Scope};

/// A run id as stored: the 16 bytes its 32 hex digits spell.
pub type RunId = [u8; 16];

/// One run in the index (48 bytes).
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    /// The run id's 16 bytes.
    pub id: RunId,
    /// Where its latest line starts in the log.
    pub offset: u64,
    /// `CreatedAt`, in milliseconds since the epoch.
    pub created_ms: i64,
    /// The length of its latest line.
    pub len: u32,
    /// Its (owner, function, tool), interned.
    kind: u32,
    /// Its origin (`By`), interned.
    origin: u32,
    /// Its latest state.
    pub state: RunState,
}

impl Slot {
    /// The run has not ended: compaction keeps it whatever its age.
    pub fn live(&self) -> bool {
        !self.state.is_terminal()
    }

    /// Its place in the list order.
    pub fn key(&self) -> Cursor {
        Cursor {
            created_ms: self.created_ms,
            id: self.id,
        }
    }
}

/// What a run is of: its owner, function and tool.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Kind {
    owner: Owner,
    function: Box<str>,
    tool: Option<Box<str>>,
}

/// Distinct values, each numbered once.
#[derive(Debug)]
struct Interner<T> {
    values: Vec<T>,
    numbers: HashMap<T, u32>,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            values: Vec::new(),
            numbers: HashMap::new(),
        }
    }
}

impl<T: Clone + Eq + Hash> Interner<T> {
    fn number(&mut self, v: T) -> u32 {
        if let Some(&n) = self.numbers.get(&v) {
            return n;
        }
        let n = u32::try_from(self.values.len()).unwrap_or(u32::MAX);
        self.values.push(v.clone());
        self.numbers.insert(v, n);
        n
    }

    /// For each value, whether `ok` says it passes.
    fn passing(&self, ok: impl Fn(&T) -> bool) -> Vec<bool> {
        self.values.iter().map(ok).collect()
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.values.capacity() * (std::mem::size_of::<T>() * 2 + 16)
    }
}

/// The index of the kept runs.
#[derive(Debug, Default)]
pub struct Index {
    /// Sorted by [`Slot::key`], oldest first.
    slots: Vec<Slot>,
    /// Positions in `slots`, found by the hash of the run id.
    by_id: HashTable<u32>,
    hasher: RandomState,
    kinds: Interner<Kind>,
    origins: Interner<Box<str>>,
    /// Runs that have not ended.
    live: usize,
}

impl Index {
    /// An empty index with room for `n` runs.
    pub fn with_capacity(n: usize) -> Index {
        Index {
            slots: Vec::with_capacity(n),
            by_id: HashTable::with_capacity(n),
            ..Index::default()
        }
    }

    /// Runs kept.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Runs kept that have not ended.
    pub fn live(&self) -> usize {
        self.live
    }

    /// The runs, oldest first.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    fn position(&self, id: &RunId) -> Option<usize> {
        let slots = &self.slots;
        self.by_id
            .find(self.hasher.hash_one(id), |&p| slots[p as usize].id == *id)
            .map(|&p| p as usize)
    }

    /// Run `id`, if kept.
    pub fn get(&self, id: &RunId) -> Option<&Slot> {
        self.position(id).map(|p| &self.slots[p])
    }

    /// Whose run `slot` is.
    pub fn owner(&self, slot: &Slot) -> Owner {
        self.kinds.values[slot.kind as usize].owner
    }

    /// Note that the latest line of `rec`'s run `id` is `len` bytes at
    /// `offset`: a known run gets its new place and state, a new one its
    /// slot in the order.
    pub fn put(&mut self, id: RunId, rec: &RunRecord, offset: u64, len: u32) {
        if let Some(p) = self.position(&id) {
            let s = &mut self.slots[p];
            self.live -= usize::from(s.live());
            s.offset = offset;
            s.len = len;
            s.state = rec.state;
            self.live += usize::from(s.live());
            return;
        }
        let kind = self.kinds.number(Kind {
            owner: rec.owner,
            function: rec.function.as_str().into(),
            tool: rec.tool.as_ref().map(|t| t.tool.as_str().into()),
        });
        let origin = self.origins.number(rec.by.to_string().into());
        let slot = Slot {
            id,
            offset,
            created_ms: rec.created_at.timestamp().as_millisecond(),
            len,
            kind,
            origin,
            state: rec.state,
        };
        self.live += usize::from(slot.live());
        self.insert(slot);
    }

    /// Add a new slot at its place in the order: almost always the end
    /// (runs are recorded about as they are created); runs created in the
    /// same moments by other threads may land a few places before it.
    fn insert(&mut self, slot: Slot) {
        let key = slot.key();
        let at = self.slots.partition_point(|s| s.key() <= key);
        self.slots.insert(at, slot);
        // The runs after it moved up by one: from the last down, so that
        // each old position is held by exactly one entry when it is found.
        for p in (at + 1..self.slots.len()).rev() {
            let h = self.hasher.hash_one(self.slots[p].id);
            let old = (p - 1) as u32;
            if let Some(q) = self.by_id.find_mut(h, |&q| q == old) {
                *q = p as u32;
            }
        }
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.by_id
            .insert_unique(hasher.hash_one(slot.id), at as u32, |&q| {
                hasher.hash_one(slots[q as usize].id)
            });
    }

    /// Keep the runs `keep` says (it may change their offset), in order,
    /// and drop the others; the dropped ids.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut Slot) -> bool) -> Vec<RunId> {
        let mut dropped = Vec::new();
        self.slots.retain_mut(|s| {
            let k = keep(s);
            if !k {
                dropped.push(s.id);
            }
            k
        });
        self.slots.shrink_to_fit();
        self.live = self.slots.iter().filter(|s| s.live()).count();
        self.by_id = HashTable::with_capacity(self.slots.len());
        let (slots, hasher) = (&self.slots, &self.hasher);
        for (p, s) in slots.iter().enumerate() {
            self.by_id
                .insert_unique(hasher.hash_one(s.id), p as u32, |&q| {
                    hasher.hash_one(slots[q as usize].id)
                });
        }
        dropped
    }

    /// The runs `filter` selects, newest first, at most its `limit`; and
    /// whether more follow.
    pub fn select(&self, filter: &RunFilter) -> (Vec<Slot>, bool) {
        let kind_ok = self.kinds.passing(|k| kind_passes(k, filter));
        let origin_ok = filter
            .origin
            .as_ref()
            .map(|o| self.origins.passing(|v| origin_passes(v, o)));
        let end = self.end_before(filter);
        let start = match filter.since {
            Some(t) => {
                let ms = t.timestamp().as_millisecond();
                self.slots.partition_point(|s| s.created_ms < ms)
            }
            None => 0,
        };
        let mut hits = self.slots[start.min(end)..end].iter().rev().filter(|s| {
            kind_ok[s.kind as usize]
                && filter.state.is_none_or(|st| st == s.state)
                && origin_ok.as_ref().is_none_or(|ok| ok[s.origin as usize])
        });
        let page: Vec<Slot> = hits.by_ref().take(filter.limit).copied().collect();
        let more = hits.next().is_some();
        (page, more)
    }

    /// Where a page starts (exclusive), from the newest end: before the
    /// cursor and `until`.
    fn end_before(&self, filter: &RunFilter) -> usize {
        let mut end = self.slots.len();
        if let Some(c) = filter.before {
            end = end.min(self.slots.partition_point(|s| s.key() < c));
        }
        if let Some(t) = filter.until {
            let ms = t.timestamp().as_millisecond();
            end = end.min(self.slots.partition_point(|s| s.created_ms < ms));
        }
        end
    }

    /// Bytes the index holds (its vectors and table, and the interned
    /// values, estimated), for the measurement in the docs.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.by_id.allocation_size()
            + self.kinds.bytes()
            + self.origins.bytes()
    }
}

/// Whether runs of `k` pass the scope and the program, function and tool
/// filters.
fn kind_passes(k: &Kind, f: &RunFilter) -> bool {
    let in_scope = match (&f.scope, k.owner) {
        (Scope::All, _) => true,
        (Scope::Only { programs, .. }, Owner::Program(id)) => programs.contains(&id),
        (Scope::Only { hooks, .. }, Owner::Hook) => *hooks,
    };
    in_scope
        && f.program.is_none_or(|p| k.owner == Owner::Program(p))
        && f.function.as_deref().is_none_or(|x| *k.function == *x)
        && f.tool
            .as_deref()
            .is_none_or(|t| k.tool.as_deref() == Some(t))
}

/// Whether origin `by` (as in JSON) passes `o`.
fn origin_passes(by: &str, o: &OriginFilter) -> bool {
    match o {
        OriginFilter::Exact(x) => by == x.to_string(),
        OriginFilter::Kind(k) => by
            .strip_prefix(k.as_str())
            .is_some_and(|rest| rest.starts_with(':')),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::record::Origin;
    use crate::state::time::Time;

    fn rec(n: u64, ms: i64, state: RunState) -> RunRecord {
        let created_at = Time::from(jiff::Timestamp::from_millisecond(ms).unwrap());
        let text = format!(
            r#"{{"Run":"{n:032x}","State":"{}","Owner":"program","Program":{},"Function":"f{}","By":"api_key:k{}","CreatedAt":"{created_at}"}}"#,
            state.name(),
            n % 7,
            n % 3,
            n % 2
        );
        serde_json::from_str(&text).unwrap()
    }

    fn id(n: u64) -> RunId {
        let mut b = [0u8; 16];
        b[8..].copy_from_slice(&n.to_be_bytes());
        b
    }

    #[test]
    fn a_slot_is_48_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 48);
    }

    /// The figure `docs/runs.md` states: the index of 1,000,000 runs holds
    /// at most 64 bytes a run (slots, id table, interned values).
    #[test]
    fn index_stays_under_64_bytes_a_run() {
        let n = 1_000_000u64;
        let mut ix = Index::default();
        for i in 0..n {
            ix.put(
                id(i),
                &rec(i, 1_700_000_000_000 + i as i64, RunState::Finished),
                i * 300,
                300,
            );
        }
        let per_run = ix.bytes() as f64 / n as f64;
        eprintln!(
            "index: {} bytes for {n} runs, {per_run:.1} a run",
            ix.bytes()
        );
        assert!(per_run <= 64.0, "{per_run} bytes a run");
        assert_eq!(ix.get(&id(123_456)).unwrap().offset, 123_456 * 300);
    }

    #[test]
    fn out_of_order_inserts_keep_the_order_and_every_id_found() {
        let mut ix = Index::default();
        let times = [5, 3, 9, 1, 5, 7, 2, 8, 5, 0];
        for (i, t) in times.iter().enumerate() {
            ix.put(
                id(i as u64),
                &rec(i as u64, *t, RunState::Queued),
                i as u64,
                1,
            );
        }
        let keys: Vec<Cursor> = ix.slots().iter().map(Slot::key).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
        for i in 0..times.len() as u64 {
            assert_eq!(ix.get(&id(i)).unwrap().offset, i);
        }
        assert_eq!(ix.live(), times.len());
        ix.put(id(3), &rec(3, 1, RunState::Failed), 99, 2);
        assert_eq!(ix.live(), times.len() - 1);
        let dropped = ix.retain(|s| s.created_ms != 5);
        assert_eq!(dropped.len(), 3);
        assert!(ix.get(&id(0)).is_none() && ix.get(&id(3)).unwrap().offset == 99);
    }

    #[test]
    fn select_pages_by_cursor_and_filters() {
        let mut ix = Index::default();
        for i in 0..100u64 {
            let st = if i % 4 == 0 {
                RunState::Failed
            } else {
                RunState::Finished
            };
            ix.put(id(i), &rec(i, i as i64 * 10, st), i, 1);
        }
        let mut f = RunFilter {
            program: Some(1),
            state: Some(RunState::Failed),
            limit: 2,
            ..RunFilter::default()
        };
        let mut seen = Vec::new();
        loop {
            let (page, more) = ix.select(&f);
            seen.extend(page.iter().map(|s| s.offset));
            if !more {
                break;
            }
            f.before = page.last().map(Slot::key);
        }
        let want: Vec<u64> = (0..100)
            .rev()
            .filter(|i| i % 4 == 0 && i % 7 == 1)
            .collect();
        assert_eq!(seen, want);
        let f = RunFilter {
            origin: Some(OriginFilter::Exact(Origin::ApiKey("k1".into()))),
            since: Some(Time::from(jiff::Timestamp::from_millisecond(500).unwrap())),
            until: Some(Time::from(jiff::Timestamp::from_millisecond(600).unwrap())),
            limit: 50,
            ..RunFilter::default()
        };
        let (page, more) = ix.select(&f);
        let got: Vec<u64> = page.iter().map(|s| s.offset).collect();
        assert_eq!(got, vec![59, 57, 55, 53, 51]);
        assert!(!more);
        let kind = RunFilter {
            origin: Some(OriginFilter::Kind("api".into())),
            ..RunFilter::default()
        };
        assert!(
            ix.select(&kind).0.is_empty(),
            "a kind is the text before ':'"
        );
    }
}
