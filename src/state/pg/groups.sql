-- Concurrency groups (issue 35, migration 2; owner: pgrun): a run's group
-- key and its group's limit and policy, as the record holds them (`Group`;
-- `Input.GroupLimit`, `Input.GroupPolicy` while the run has not ended), so
-- that taking a run from the cluster queue can skip runs whose key is at
-- its limit on any instance.
ALTER TABLE trigd_runs
    ADD COLUMN group_key text GENERATED ALWAYS AS (record->>'Group') STORED,
    ADD COLUMN group_limit integer
        GENERATED ALWAYS AS ((record->'Input'->>'GroupLimit')::integer) STORED,
    ADD COLUMN group_policy text GENERATED ALWAYS AS (record->'Input'->>'GroupPolicy') STORED;
-- The runs of a key that hold or wait for its places.
CREATE INDEX trigd_runs_group ON trigd_runs (group_key, seq)
    WHERE group_key IS NOT NULL AND state IN ('queued', 'running');
