-- The cluster queue's take (`cluster::TAKE`, which says why the update
-- names the run by its id alone and why a run of a group waits for the
-- older runs of its key still in the queue; owner: pgrun). The older of
-- two runs, each locked (`SKIP LOCKED` passes over the runs other takes
-- hold until their COMMIT): the oldest run of no group this instance may
-- take (trigd_runs_free), and the oldest next run of a key it may take.
-- A key's next run is its oldest still in the queue (one another take
-- holds included: then the key waits), taken only while the key has
-- fewer runs than its limit taken or running (trigd_runs_group_held,
-- read up to the limit). The next runs are looked for among the 256
-- oldest runs of any key (trigd_runs_group_seq): with many keys, one of
-- those nearly always is; when none is (the oldest all wait behind full
-- keys), each key with runs queued is visited in trigd_runs_group_free,
-- a few index reads a key, so that no run waiting behind a full key is
-- read (group_queues.sql). Each subquery is read in its index's order,
-- the only plan without a sort for it (take_plan.sql). The recheck of a
-- key's next run after its lock is written `IS TRUE` so that no index of
-- all queued runs (trigd_runs_by_state) can answer it: with statistics
-- older than the queue, that index looked cheaper than the primary key.
UPDATE trigd_runs SET instance = $1 WHERE id = (
    SELECT c.id FROM (
        SELECT f.id, f.seq FROM (
            SELECT id, seq FROM trigd_runs
            WHERE state = 'queued' AND instance IS NULL AND group_key IS NULL
            AND (record->>'Async')::boolean
            AND (NOT coalesce((record->'Input'->>'Body')::boolean, false) OR id LIKE $2)
            AND EXISTS (SELECT 1 FROM trigd_instances WHERE name = $1 AND expires_at > now())
            ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED) AS f
        UNION ALL
        SELECT g.id, g.seq FROM (
            SELECT id, seq FROM trigd_runs
            WHERE id = ANY (coalesce(nullif(ARRAY(
                SELECT q.id FROM (
                    SELECT id, seq, group_key, group_limit, record FROM trigd_runs
                    WHERE group_key IS NOT NULL AND state = 'queued' AND instance IS NULL
                    AND seq > 0 ORDER BY seq LIMIT 256) AS q
                WHERE (q.record->>'Async')::boolean
                AND (NOT coalesce((q.record->'Input'->>'Body')::boolean, false) OR q.id LIKE $2)
                AND (SELECT o.seq FROM trigd_runs o WHERE o.group_key = q.group_key
                     AND o.state = 'queued' AND o.instance IS NULL ORDER BY o.seq LIMIT 1) = q.seq
                AND (SELECT count(*) FROM (SELECT FROM trigd_runs g
                     WHERE g.group_key = q.group_key AND g.state IN ('queued', 'running')
                     AND g.instance IS NOT NULL
                     ORDER BY g.seq LIMIT greatest(coalesce(q.group_limit, 1), 0)) AS held)
                    < coalesce(q.group_limit, 1)
                ORDER BY q.seq LIMIT 8), '{}'), ARRAY(
                WITH RECURSIVE keys (key) AS (
                    (SELECT group_key FROM trigd_runs
                     WHERE group_key IS NOT NULL AND state = 'queued' AND instance IS NULL
                     ORDER BY group_key LIMIT 1)
                    UNION ALL
                    SELECT (SELECT n.group_key FROM trigd_runs n
                            WHERE n.group_key > keys.key AND n.state = 'queued'
                            AND n.instance IS NULL ORDER BY n.group_key LIMIT 1)
                    FROM keys WHERE keys.key IS NOT NULL)
                SELECT h.id FROM keys CROSS JOIN LATERAL (
                    SELECT o.id, o.group_limit, o.record FROM trigd_runs o
                    WHERE o.group_key = keys.key AND o.state = 'queued' AND o.instance IS NULL
                    ORDER BY o.seq LIMIT 1) AS h
                WHERE (h.record->>'Async')::boolean
                AND (NOT coalesce((h.record->'Input'->>'Body')::boolean, false) OR h.id LIKE $2)
                AND (SELECT count(*) FROM (SELECT FROM trigd_runs g
                     WHERE g.group_key = keys.key AND g.state IN ('queued', 'running')
                     AND g.instance IS NOT NULL
                     ORDER BY g.seq LIMIT greatest(coalesce(h.group_limit, 1), 0)) AS held)
                    < coalesce(h.group_limit, 1))))
            AND (state = 'queued' AND instance IS NULL) IS TRUE
            AND EXISTS (SELECT 1 FROM trigd_instances WHERE name = $1 AND expires_at > now())
            ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED) AS g
    ) AS c ORDER BY c.seq LIMIT 1)
RETURNING record::text, id, group_key, coalesce(group_limit, 1), group_policy, seq
