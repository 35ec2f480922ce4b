-- pgbench_claim.sql - due's claim -> complete cycle as a pgbench custom
-- script: the floor of bench/floor.c again, measured by PostgreSQL's own
-- load generator with C client connections.  Each run of the script claims
-- up to :batch due rows of floor_task in ONE statement (FOR UPDATE SKIP
-- LOCKED, like due's claim), then completes them in ONE statement, fenced
-- by the attempt each was claimed with; every statement commits on its own
-- (two commits per batch).  bench/run fills floor_task first
-- (`floor URL --workload fill --n N`) and runs
--   pgbench -n -M prepared -D batch=K -f bench/pgbench_claim.sql -c C -T SECS URL
-- then counts the DONE rows.  -M prepared (or extended) is required: the
-- claimed ids cross from the first statement to the second as array
-- parameters.  The predicates are bench/floor.c's (see FLOOR_PG_DONE there):
-- "lease_owner IS NOT NULL" stands for state = 'CLAIMED' so that the
-- planner cannot use the partial lease index in a bitmap scan.
WITH c AS (
  UPDATE floor_task SET state = 'CLAIMED', attempt = attempt + 1,
         lease_owner = 'pgbench', lease_until = clock_timestamp() + interval '30 seconds',
         updated_at = now()
   WHERE id = ANY (ARRAY (SELECT id FROM floor_task
                           WHERE state = 'SCHEDULED' AND due_at <= now()
                           ORDER BY due_at LIMIT :batch FOR UPDATE SKIP LOCKED))
  RETURNING id, attempt)
SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(attempt), '{}') AS atts FROM c
\gset
UPDATE floor_task t SET state = 'DONE', result = 'ok'::bytea,
       lease_owner = NULL, lease_until = NULL, updated_at = now()
  FROM unnest(:ids::int8[], :atts::int4[]) AS u(id, attempt)
 WHERE t.id = ANY (:ids::int8[]) AND t.id = u.id AND t.attempt = u.attempt
   AND t.lease_owner IS NOT NULL;
