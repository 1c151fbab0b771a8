//! The run log's index in memory: for every kept run, where its latest line
//! sits and what a list filters on, in 48 bytes (40 for the place, 8 for
//! the filter fields, kept apart so that a search reads 8 bytes a run), plus a 4-byte position in
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

use super::filter::{Cursor, OriginFilter, RunFilter, Scope};
use super::record::{Owner, RunRecord, RunState, ALL_STATES};

/// A run id as stored: the 16 bytes its 32 hex digits spell.
pub type RunId = [u8; 16];

/// Where one run's latest line is, and its place in the list order (40
/// bytes; with its [`Meta`], 48).
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
}

impl Slot {
    /// Its place in the list order.
    pub fn key(&self) -> Cursor {
        Cursor {
            created_ms: self.created_ms,
            id: self.id,
        }
    }
}

/// What a list filters on, packed in 8 bytes and kept apart from the
/// slots, so that a search that reads every run reads 8 bytes of each, not
/// 48: bits 0-31 the run's (owner, function, tool) number, bits 32-55 its
/// origin number, bits 56-63 its state (index in `ALL_STATES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Meta(u64);

/// Origin numbers stop here: a run log with more distinct origins (16
/// million) counts the rest as one.
const MAX_ORIGIN: u32 = (1 << 24) - 1;

impl Meta {
    fn new(kind: u32, origin: u32, state: RunState) -> Meta {
        let origin = u64::from(origin.min(MAX_ORIGIN));
        Meta(u64::from(kind) | origin << 32 | u64::from(state_index(state)) << 56)
    }

    fn kind(self) -> usize {
        (self.0 & 0xFFFF_FFFF) as usize
    }

    fn origin(self) -> usize {
        ((self.0 >> 32) & u64::from(MAX_ORIGIN)) as usize
    }

    fn state(self) -> RunState {
        ALL_STATES[((self.0 >> 56) as usize).min(ALL_STATES.len() - 1)]
    }

    fn with_state(self, state: RunState) -> Meta {
        Meta(self.0 & !(0xFF << 56) | u64::from(state_index(state)) << 56)
    }

    /// The run has not ended: compaction keeps it whatever its age.
    fn live(self) -> bool {
        !self.state().is_terminal()
    }
}

fn state_index(state: RunState) -> u8 {
    ALL_STATES.iter().position(|s| *s == state).unwrap_or(0) as u8
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
    /// The filter fields of each slot, at the same positions.
    meta: Vec<Meta>,
    /// Positions in `slots`, found by the hash of the run id.
    by_id: HashTable<u32>,
    hasher: RandomState,
    kinds: Interner<Kind>,
    origins: Interner<Box<str>>,
    /// Runs that have not ended.
    live: usize,
}

impl Index {
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

    /// Whose run `id` is.
    pub fn owner(&self, id: &RunId) -> Option<Owner> {
        let p = self.position(id)?;
        Some(self.kinds.values[self.meta[p].kind()].owner)
    }

    /// The state of run `id`.
    pub fn state(&self, id: &RunId) -> Option<RunState> {
        self.position(id).map(|p| self.meta[p].state())
    }

    /// Whether the run at position `p` has not ended.
    pub fn live_at(&self, p: usize) -> bool {
        self.meta[p].live()
    }

    /// Note that the latest line of `rec`'s run `id` is `len` bytes at
    /// `offset`: a known run gets its new place and state, a new one its
    /// slot in the order.
    pub fn put(&mut self, id: RunId, rec: &RunRecord, offset: u64, len: u32) {
        if !self.moved(&id, rec, offset, len) {
            let (slot, meta) = self.new_slot(id, rec, offset, len);
            self.insert(slot, meta);
        }
    }

    /// [`Index::put`] for a line read from the log at start-up, in file
    /// order: a new run goes to the end whatever its place, and
    /// [`Index::sort`] puts the runs in order once every line is read (one
    /// sort, where putting each in its place shifted every run after it
    /// for each run out of order).
    pub fn load(&mut self, id: RunId, rec: &RunRecord, offset: u64, len: u32) {
        if self.moved(&id, rec, offset, len) {
            return;
        }
        let (slot, meta) = self.new_slot(id, rec, offset, len);
        let at = self.slots.len() as u32;
        self.slots.push(slot);
        self.meta.push(meta);
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.by_id.insert_unique(hasher.hash_one(id), at, |&q| {
            hasher.hash_one(slots[q as usize].id)
        });
    }

    /// Put the runs [`Index::load`] added in the list order.
    pub fn sort(&mut self) {
        if self.slots.is_sorted_by_key(Slot::key) {
            return;
        }
        let mut order: Vec<u32> = (0..self.slots.len() as u32).collect();
        order.sort_unstable_by_key(|&p| self.slots[p as usize].key());
        self.slots = order.iter().map(|&p| self.slots[p as usize]).collect();
        self.meta = order.iter().map(|&p| self.meta[p as usize]).collect();
        drop(order);
        self.rehash();
    }

    /// Give known run `id` its new line and state; false when it is new.
    fn moved(&mut self, id: &RunId, rec: &RunRecord, offset: u64, len: u32) -> bool {
        let Some(p) = self.position(id) else {
            return false;
        };
        let s = &mut self.slots[p];
        s.offset = offset;
        s.len = len;
        let m = &mut self.meta[p];
        self.live -= usize::from(m.live());
        *m = m.with_state(rec.state);
        self.live += usize::from(m.live());
        true
    }

    /// The slot and filter fields of a new run (counted live if it is).
    fn new_slot(&mut self, id: RunId, rec: &RunRecord, offset: u64, len: u32) -> (Slot, Meta) {
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
        };
        let meta = Meta::new(kind, origin, rec.state);
        self.live += usize::from(meta.live());
        (slot, meta)
    }

    /// Add a new slot at its place in the order: almost always the end
    /// (runs are recorded about as they are created); runs created in the
    /// same moments by other threads may land a few places before it.
    fn insert(&mut self, slot: Slot, meta: Meta) {
        let key = slot.key();
        let at = self.slots.partition_point(|s| s.key() <= key);
        self.slots.insert(at, slot);
        self.meta.insert(at, meta);
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
        let mut kept = Vec::with_capacity(self.slots.len());
        for s in &mut self.slots {
            let k = keep(s);
            if !k {
                dropped.push(s.id);
            }
            kept.push(k);
        }
        let mut flags = kept.iter();
        self.slots.retain(|_| *flags.next().unwrap_or(&true));
        let mut flags = kept.iter();
        self.meta.retain(|_| *flags.next().unwrap_or(&true));
        drop(kept);
        self.slots.shrink_to_fit();
        self.meta.shrink_to_fit();
        self.live = self.meta.iter().filter(|m| m.live()).count();
        self.rehash();
        dropped
    }

    /// Find every run by id at its current position again.
    fn rehash(&mut self) {
        self.by_id = HashTable::with_capacity(self.slots.len());
        let (slots, hasher) = (&self.slots, &self.hasher);
        for (p, s) in slots.iter().enumerate() {
            self.by_id
                .insert_unique(hasher.hash_one(s.id), p as u32, |&q| {
                    hasher.hash_one(slots[q as usize].id)
                });
        }
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
        let start = start.min(end);
        let passes = |m: &Meta| {
            kind_ok.get(m.kind()).copied().unwrap_or(false)
                && filter.state.is_none_or(|st| st == m.state())
                && origin_ok
                    .as_ref()
                    .is_none_or(|ok| ok.get(m.origin()).copied().unwrap_or(false))
        };
        let mut hits = self.meta[start..end]
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, m)| passes(m))
            .map(|(i, _)| self.slots[start + i]);
        let page: Vec<Slot> = hits.by_ref().take(filter.limit).collect();
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
            + self.meta.capacity() * std::mem::size_of::<Meta>()
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
    fn a_run_is_48_bytes_besides_its_id_table() {
        assert_eq!(
            std::mem::size_of::<Slot>() + std::mem::size_of::<Meta>(),
            48
        );
        let m = Meta::new(7, 9, RunState::TimedOut).with_state(RunState::Cancelled);
        assert_eq!(
            (m.kind(), m.origin(), m.state()),
            (7, 9, RunState::Cancelled)
        );
        assert_eq!(
            Meta::new(1, u32::MAX, RunState::Queued).origin(),
            MAX_ORIGIN as usize
        );
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

    /// Start-up's load (in file order, one sort at the end) makes the
    /// index runs put one by one make, a later line of a run winning.
    #[test]
    fn a_load_in_file_order_then_sorted_equals_puts() {
        let times = [5, 3, 9, 1, 5, 7, 2, 8, 5, 0];
        let (mut put, mut load) = (Index::default(), Index::default());
        for (i, t) in times.iter().enumerate() {
            let r = rec(i as u64, *t, RunState::Queued);
            put.put(id(i as u64), &r, i as u64, 1);
            load.load(id(i as u64), &r, i as u64, 1);
        }
        let ended = rec(3, 1, RunState::Failed);
        put.put(id(3), &ended, 99, 2);
        load.load(id(3), &ended, 99, 2);
        load.sort();
        let keys = |ix: &Index| {
            ix.slots()
                .iter()
                .map(|s| (s.key(), s.offset))
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(&load), keys(&put));
        assert_eq!(load.live(), put.live());
        for i in 0..times.len() as u64 {
            assert_eq!(
                load.get(&id(i)).unwrap().offset,
                put.get(&id(i)).unwrap().offset
            );
            assert_eq!(load.state(&id(i)), put.state(&id(i)));
        }
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
        assert_eq!(ix.state(&id(3)), Some(RunState::Queued));
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
