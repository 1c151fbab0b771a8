-- Run records (owner: pg). One row per run; `record` is the whole
-- RunRecord as one runs.log line holds it, the columns beside it are the
-- parts queries filter and order by.
CREATE TABLE trigd_runs (
    id text PRIMARY KEY,
    -- Queue order and the list cursor (newest first).
    seq bigserial UNIQUE,
    state text NOT NULL,
    program text,
    function text,
    tool text,
    -- Whose run it is: `Owner` as text (program id, tool, hook).
    owner text,
    origin text,
    -- The instance executing it; null while queued.
    instance text,
    created_at timestamptz NOT NULL,
    ended_at timestamptz,
    cancel_requested boolean NOT NULL DEFAULT false,
    record jsonb NOT NULL
);
CREATE INDEX trigd_runs_queue ON trigd_runs (seq) WHERE state = 'queued';
CREATE INDEX trigd_runs_state ON trigd_runs (state, seq);
CREATE INDEX trigd_runs_owner ON trigd_runs (owner, seq);
CREATE INDEX trigd_runs_ended ON trigd_runs (ended_at) WHERE ended_at IS NOT NULL;

-- Idempotency claims (owner: pg): one per (caller, key hash), inserted in
-- the statement that records the run, so the two cannot part.
CREATE TABLE trigd_idempotency (
    scope text NOT NULL,
    key_hash text NOT NULL,
    request_hash text NOT NULL,
    run_id text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, key_hash)
);
CREATE INDEX trigd_idempotency_created ON trigd_idempotency (created_at);
