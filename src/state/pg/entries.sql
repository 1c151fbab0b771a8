-- Fewer index entries a run write (issue 32, migration 4; owner: pg). An
-- async run's row is written four times (accepted `queued`, taken,
-- `running`, ended), none of them an in-place (HOT) update, so each write
-- adds an entry to every index whose predicate it meets.
-- `seq` comes from its sequence, unique without an index to say so, and
-- no query looks a run up by it or orders all runs by it (the queue, the
-- trim and a group's runs have their own partial indexes on it; the newest
-- run at start is the sequence's last value):
ALTER TABLE trigd_runs DROP CONSTRAINT trigd_runs_seq_key;
-- the runs an instance holds were indexed twice a run (taken, `running`)
-- for the cancel poll, which wants only the runs asked to stop, and for
-- the adoption of a lapsed instance's runs, rare, which reads the runs
-- queued or running through trigd_runs_by_state instead:
DROP INDEX trigd_runs_instance;
CREATE INDEX trigd_runs_cancel ON trigd_runs (instance) WHERE cancel_requested;
