-- Instances and leases, output chunks, the callback spool (owner: pgrun).

-- One row per live instance: its lease on the runs it executes lasts
-- until `expires_at` (renewed every lease/3). A row whose lease lapsed is
-- deleted by the instance that adopts its runs.
CREATE TABLE trigd_instances (
    name text PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT now(),
    renewed_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

-- Taking: async queued runs nobody has taken, oldest first.
CREATE INDEX trigd_runs_free ON trigd_runs (seq) WHERE state = 'queued' AND instance IS NULL;
-- An instance's runs (adoption when its lease lapses; its cancel requests).
CREATE INDEX trigd_runs_instance ON trigd_runs (instance) WHERE instance IS NOT NULL
    AND state IN ('queued', 'running');

-- Kept output of runs, in chunks appended while the run executes (batched),
-- up to `max_output_bytes` per stream: readable from any instance, also
-- after the executing one is gone. `frames`: closed frames as the output
-- file holds them (src/state/output.rs); removed with the run's record.
CREATE TABLE trigd_output (
    run text NOT NULL REFERENCES trigd_runs (id) ON DELETE CASCADE,
    n integer NOT NULL,
    frames bytea NOT NULL,
    PRIMARY KEY (run, n)
);

-- The callback spool: one row per pending delivery (`spool::Pending` as
-- JSON), sent only by its holder: the instance that ended the run, or the
-- one that adopted them when the holder's lease lapsed. `seq` is unique in
-- the cluster (the holder's start time in ms, shifted, plus a counter).
CREATE TABLE trigd_callbacks (
    holder text NOT NULL,
    seq bigint NOT NULL,
    run text NOT NULL,
    pending jsonb NOT NULL,
    PRIMARY KEY (holder, seq)
);

-- Schedules fire once per cluster: an occurrence (Unix ms) is handled
-- (run or recorded skipped) only by the instance whose insert of its row
-- succeeds.
CREATE TABLE trigd_occurrences (
    schedule text NOT NULL,
    occurrence bigint NOT NULL,
    instance text NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule, occurrence)
);
