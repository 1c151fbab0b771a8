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
CREATE INDEX trigd_runs_created ON trigd_runs (created_at DESC, seq DESC);
-- The run list's order (issue 35): CreatedAt, then the id's hex digits.
CREATE INDEX trigd_runs_list ON trigd_runs (created_at DESC, (right(id, 32) COLLATE "C") DESC);
CREATE INDEX trigd_runs_state ON trigd_runs (state, seq);
CREATE INDEX trigd_runs_owner ON trigd_runs (owner, seq);
CREATE INDEX trigd_runs_ended ON trigd_runs (ended_at) WHERE ended_at IS NOT NULL;

-- Idempotency claims (owner: pg): one per sha256(caller, key), inserted in
-- the statement that records the run, so the two cannot part. A claim
-- past `expires_at` (idempotency_window) may be taken by a new request.
CREATE TABLE trigd_idempotency (
    key_hash text PRIMARY KEY,
    request_hash text NOT NULL,
    run_id text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX trigd_idempotency_expires ON trigd_idempotency (expires_at);
