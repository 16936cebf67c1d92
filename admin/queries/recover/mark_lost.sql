-- Runs of the given shards still `running` more than their timeout plus a grace ($2 ms) after
-- they started, on a worker that is dead (no heartbeat for $3 ms, or it said goodbye), are
-- recorded `lost`.
UPDATE triggers t
SET status = 'lost', finished_at = now(), updated_at = now(),
    message = 'lost: worker ' || COALESCE(t.worker_id, '(unknown)')
              || CASE WHEN w.stopped_at IS NOT NULL THEN ' stopped at ' || w.stopped_at
                      WHEN w.last_seen IS NOT NULL THEN ' sent its last heartbeat at ' || w.last_seen
                      ELSE ' never sent a heartbeat' END
              || ' and no result came within the run''s timeout plus ' || $2 || ' ms'
FROM triggers r
LEFT JOIN workers w ON w.worker_id = r.worker_id
WHERE t.id = r.id
  AND r.shard = ANY($1::int[]) AND r.status = 'running'
  AND r.started_at < now() - make_interval(secs => (r.timeout_ms + $2::bigint)::float8 / 1000.0)
  AND (w.worker_id IS NULL OR w.stopped_at IS NOT NULL
       OR w.last_seen < now() - make_interval(secs => $3::float8 / 1000.0))
RETURNING t.id
