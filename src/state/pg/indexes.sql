-- Fewer indexes on trigd_runs (issue 32, migration 3; owner: pg). A sync
-- run writes its row twice (`running`, then its end), and neither write
-- can be a HOT update (`state` is in the partial indexes' predicates), so
-- every write adds an entry to each index whose predicate it meets.
-- The take reads trigd_runs_free, not trigd_runs_queue:
DROP INDEX trigd_runs_queue;
-- the run list orders by trigd_runs_list, never by (created_at, seq):
DROP INDEX trigd_runs_created;
-- no query filters on owner with seq:
DROP INDEX trigd_runs_owner;
-- the run list filtered by a state used (state, seq) and sorted what it
-- found; this one gives those runs in the list's order, and leaves out
-- `finished`, the state of most runs, which the list's own index finds at
-- once: a run that ends `finished` costs it one entry (its `running`
-- row), not two:
DROP INDEX trigd_runs_state;
CREATE INDEX trigd_runs_by_state ON trigd_runs
    (state, created_at DESC, (right(id, 32) COLLATE "C") DESC) WHERE state <> 'finished';
-- the trim of old runs looks for the boundary by seq among ended runs,
-- which an index on ended_at did not give (it scanned the table):
DROP INDEX trigd_runs_ended;
CREATE INDEX trigd_runs_ended ON trigd_runs (seq) WHERE ended_at IS NOT NULL;
