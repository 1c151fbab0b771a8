-- The cluster queue's take (`cluster::TAKE`, which says why the update
-- names the run by its id alone and why a run of a group waits for the
-- older runs of its key still in the queue; owner: pgrun).
UPDATE trigd_runs SET instance = $1 WHERE id = (
    SELECT id FROM trigd_runs t WHERE state = 'queued' AND instance IS NULL
    AND (record->>'Async')::boolean
    AND (NOT coalesce((record->'Input'->>'Body')::boolean, false) OR id LIKE $2)
    AND EXISTS (SELECT 1 FROM trigd_instances WHERE name = $1 AND expires_at > now())
    AND (t.group_key IS NULL OR ((SELECT count(*) FROM trigd_runs g
         WHERE g.group_key = t.group_key AND g.state IN ('queued', 'running')
         AND g.instance IS NOT NULL) < coalesce(t.group_limit, 1)
         AND NOT EXISTS (SELECT 1 FROM trigd_runs o WHERE o.group_key = t.group_key
         AND o.state = 'queued' AND o.instance IS NULL AND o.seq < t.seq)))
    ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING record::text, id, group_key, coalesce(group_limit, 1), group_policy, seq
