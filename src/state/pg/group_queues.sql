-- A take that does not read the runs of keys at their limit (issue 32,
-- migration 5; owner: pgrun). The take (take.sql) reads the whole cluster
-- queue oldest first, and asks of each run of a concurrency group
-- whether it is the oldest of its key still in the queue and whether the
-- key has a free place. Both questions read trigd_runs_group, every
-- queued and running run of the key, so that with a key at its limit
-- and N of its runs queued a take read N runs N times: 1.1 s and 471,149
-- buffers a take with 6,000 runs queued in two full keys (PostgreSQL 15,
-- 2026-11-29), 28 ms and 18,153 buffers with these indexes.
-- Each key's queue, oldest first (its oldest run, at once):
CREATE INDEX trigd_runs_group_free ON trigd_runs (group_key, seq)
    WHERE group_key IS NOT NULL AND state = 'queued' AND instance IS NULL;
-- the runs that hold a key's places, taken or running, on any instance
-- (counted up to the key's limit; the oldest running one, which
-- `cancel_running` cancels):
CREATE INDEX trigd_runs_group_held ON trigd_runs (group_key, seq)
    WHERE group_key IS NOT NULL AND instance IS NOT NULL AND state IN ('queued', 'running');
-- which answer everything trigd_runs_group did:
DROP INDEX trigd_runs_group;
-- The queue's own index keeps to the take's scan of the whole queue:
-- `seq > 0` (always true, seq counts from 1) is a predicate the planner
-- cannot prove from a key's conditions, so it cannot answer "the oldest
-- queued run of this key" by reading the whole queue in order until it
-- meets one (it did, with statistics older than the queue: they make
-- trigd_runs_group_free look no cheaper).
DROP INDEX trigd_runs_free;
CREATE INDEX trigd_runs_free ON trigd_runs (seq)
    WHERE state = 'queued' AND instance IS NULL AND seq > 0;
