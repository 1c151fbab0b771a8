-- A take that does not read the runs of keys at their limit (issue 32,
-- migration 5; owner: pgrun). The take (take.sql) read the whole cluster
-- queue oldest first, and asked of each run of a concurrency group
-- whether it was the oldest of its key still in the queue and whether
-- the key had a free place, both from trigd_runs_group (every queued and
-- running run of the key): with a key at its limit and N of its runs
-- queued, a take read N runs N times (1.1 s and 471,149 buffers a take
-- with 6,000 runs queued in two full keys, PostgreSQL 15, 2026-11-29).
-- The take now reads the runs of no group from their own queue, and the
-- next run of a key from the oldest runs of any key, else from each
-- key's queue (579 buffers, 2.6 ms for that take).
-- The queue of the runs of no group, oldest first:
DROP INDEX trigd_runs_free;
CREATE INDEX trigd_runs_free ON trigd_runs (seq)
    WHERE state = 'queued' AND instance IS NULL AND group_key IS NULL;
-- each key's queue, oldest first (the keys that have one, and its oldest
-- run, at once):
CREATE INDEX trigd_runs_group_free ON trigd_runs (group_key, seq)
    WHERE group_key IS NOT NULL AND state = 'queued' AND instance IS NULL;
-- the runs holding a key's places, taken or running, on any instance
-- (counted up to the key's limit; the oldest running one, which
-- `cancel_running` cancels):
CREATE INDEX trigd_runs_group_held ON trigd_runs (group_key, seq)
    WHERE group_key IS NOT NULL AND instance IS NOT NULL AND state IN ('queued', 'running');
-- which answer everything trigd_runs_group did:
DROP INDEX trigd_runs_group;
-- The runs of a group in the queue, oldest first, whatever their key
-- (the take reads the oldest few before it visits the keys one by one:
-- with many keys, the oldest next run of a key is nearly always among
-- them). `seq > 0` (always true: seq counts from 1) keeps this index to
-- that read: the planner cannot prove it from a key's conditions, so it
-- cannot answer "the oldest run of this key" by reading every key's
-- runs in order until one of the key comes (it did, with statistics
-- older than the queue, which make trigd_runs_group_free look no
-- cheaper).
CREATE INDEX trigd_runs_group_seq ON trigd_runs (seq)
    WHERE group_key IS NOT NULL AND state = 'queued' AND instance IS NULL AND seq > 0;
