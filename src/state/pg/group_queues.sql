-- A take that does not read the runs of keys at their limit (issue 32,
-- migration 5; owner: pgrun). The take (take.sql) read the whole cluster
-- queue oldest first, and asked of each run of a concurrency group
-- whether it was the oldest of its key still in the queue and whether
-- the key had a free place, both from trigd_runs_group (every queued and
-- running run of the key): with a key at its limit and N of its runs
-- queued, a take read N runs N times (1.1 s and 471,149 buffers a take
-- with 6,000 runs queued in two full keys, PostgreSQL 15, 2026-11-29).
-- The take now reads the runs of no group from their own queue, and the
-- oldest run of each key from the key's (59 buffers, 0.6 ms for that
-- take).
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
