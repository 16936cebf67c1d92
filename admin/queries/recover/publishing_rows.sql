-- Runs of shards this admin acquired (held at the given epochs) left `publishing` and not
-- delivered, to be
-- resolved by reading their partitions back: those marked, and due, more than $3 ms ago (their
-- send has landed or failed by now, whoever sent it: a run is sent at its fire time, and the scan
-- marks a schedule's runs when it writes them, ahead of it; the caller also leaves out runs still
-- in its timer), and — once the previous holders' sends have settled ($4) — every run marked
-- under an earlier epoch. A run this admin marked under its current epoch a moment ago is never
-- taken: its send is still in flight. Earlier holders marked their runs before this admin
-- acquired the shard ($6, per shard). Runs due from $5 on (the earliest run the admin's timer
-- holds, waiting, being sent or about to be recorded, but at most a minute back) are left for a
-- later search. At most 10,000, the earliest marked first.
--
-- The search starts at each shard's settled mark (scheduler_lease.settled_before): every run
-- marked `publishing` before it has its delivery recorded or was resolved. Runs delivered and
-- never started by a worker stay `publishing` in their rows, before the mark. triggers_pending
-- is read for each shard from the earliest of the shards' marks on; the runs found are checked
-- against the delivery record together.
WITH mine AS (
    SELECT u.shard, u.epoch, u.until, l.settled_before
    FROM UNNEST($1::int[], $2::bigint[], $6::timestamptz[]) AS u (shard, epoch, until)
    JOIN scheduler_lease l ON l.shard = u.shard
),
found AS MATERIALIZED (
    SELECT t.id, t.job_type, t.partition, t.lease_epoch, t.updated_at, t.fire_time, t.shard
    FROM triggers t
    WHERE t.status IN ('scheduled', 'publishing')
      AND t.updated_at >= (SELECT min(settled_before) FROM mine)
      AND t.updated_at < CASE WHEN $4 THEN (SELECT max(until) FROM mine)
                              ELSE now() - make_interval(secs => $3::float8 / 1000.0) END
      AND t.status = 'publishing'
      AND t.shard = ANY($1::int[])
      AND t.fire_time < CASE WHEN $4 THEN 'infinity'::timestamptz
                             ELSE now() - make_interval(secs => $3::float8 / 1000.0) END
      AND t.fire_time < COALESCE($5::timestamptz, 'infinity')
),
delivered AS MATERIALIZED (
    SELECT cadenza_delivered_among(ARRAY(SELECT id FROM found)) AS id
)
SELECT f.id, f.job_type, f.partition, f.lease_epoch, f.updated_at
FROM found f
JOIN mine ON mine.shard = f.shard
WHERE f.updated_at >= mine.settled_before
  AND (GREATEST(f.updated_at, f.fire_time) < now() - make_interval(secs => $3::float8 / 1000.0)
       OR ($4 AND (f.lease_epoch IS NULL OR f.lease_epoch < mine.epoch)))
  AND NOT EXISTS (SELECT 1 FROM delivered d WHERE d.id = f.id)
ORDER BY f.updated_at
LIMIT 10000
