-- The planner settings of the cluster queue's take (`cluster::TAKE_PLAN`,
-- which says why; owner: pgrun), for its transaction only. One round trip.
SET LOCAL plan_cache_mode = force_generic_plan;
SET LOCAL enable_sort = off;
SET LOCAL enable_seqscan = off;
SET LOCAL jit = off;
