-- Runs of the given shards (held at the given epochs) left `publishing`, to be resolved by reading
-- their partitions back: those marked, and due, more than $3 ms ago (their send has landed or
-- failed by now, whoever sent it: a run is sent at its fire time, and the scan marks a schedule's
-- runs when it writes them, ahead of it; the caller also leaves out runs still in its timer),
-- and — once the previous holders' sends have settled ($4) — every run marked under an earlier
-- epoch. A run this admin marked under its current epoch a moment ago is
-- never taken: its send is still in flight. Runs due from $5 on (the earliest run the admin's
-- timer holds, waiting, being sent or about to be recorded, but at most a minute back) are left
-- for a later search. At most 10,000.
--
-- Each shard is read in fire-time order from triggers_pending, up to the fire-time bound (none
-- after a takeover), with a plain index scan: it marks the dead entries that runs recorded
-- `published` leave behind, so the next search passes over them without reading the table
-- (a bitmap scan read all of them again on every call until vacuum came by). The bound keeps
-- the runs written ahead, a few seconds of every job's fires, out of it.
SELECT r.id, r.job_type, r.partition, r.lease_epoch, r.updated_at
FROM UNNEST($1::int[], $2::bigint[]) AS mine (shard, epoch)
CROSS JOIN LATERAL (
    SELECT t.id, t.job_type, t.partition, t.lease_epoch, t.updated_at
    FROM triggers t
    WHERE t.shard = mine.shard
      AND t.status = 'publishing'
      AND t.fire_time < CASE WHEN $4 THEN 'infinity'::timestamptz
                             ELSE now() - make_interval(secs => $3::float8 / 1000.0) END
      AND t.fire_time < COALESCE($5::timestamptz, 'infinity')
      AND (GREATEST(t.updated_at, t.fire_time) < now() - make_interval(secs => $3::float8 / 1000.0)
           OR ($4 AND (t.lease_epoch IS NULL OR t.lease_epoch < mine.epoch)))
    ORDER BY t.fire_time
    LIMIT 10000
) AS r
ORDER BY r.id
LIMIT 10000
