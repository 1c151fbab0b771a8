-- The cluster queue's take (`cluster::TAKE`, which says why the update
-- names the run by its id alone and why a run of a group waits for the
-- older runs of its key still in the queue; owner: pgrun). A run of a
-- group is taken when it is the oldest of its key in the queue
-- (trigd_runs_group_free) and the key has a free place: fewer than its
-- limit taken or running (trigd_runs_group_held, read up to the limit).
-- Each of the two is read in its index's order, the only plan without a
-- sort (take_plan.sql forbids sorts), whatever the statistics say.
UPDATE trigd_runs SET instance = $1 WHERE id = (
    SELECT id FROM trigd_runs t WHERE state = 'queued' AND instance IS NULL AND seq > 0
    AND (record->>'Async')::boolean
    AND (NOT coalesce((record->'Input'->>'Body')::boolean, false) OR id LIKE $2)
    AND EXISTS (SELECT 1 FROM trigd_instances WHERE name = $1 AND expires_at > now())
    AND (t.group_key IS NULL OR (
        (SELECT o.seq FROM trigd_runs o WHERE o.group_key = t.group_key
         AND o.state = 'queued' AND o.instance IS NULL ORDER BY o.seq LIMIT 1) = t.seq
        AND (SELECT count(*) FROM (SELECT FROM trigd_runs g
             WHERE g.group_key = t.group_key AND g.state IN ('queued', 'running')
             AND g.instance IS NOT NULL
             ORDER BY g.seq LIMIT greatest(coalesce(t.group_limit, 1), 0)) AS held)
            < coalesce(t.group_limit, 1)))
    ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING record::text, id, group_key, coalesce(group_limit, 1), group_policy, seq
