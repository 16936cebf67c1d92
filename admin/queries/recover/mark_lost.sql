-- Runs of the given shards still `running` more than their timeout plus a grace ($2 ms) after
-- they started, on a worker that is dead (no heartbeat for $3 ms, or it said goodbye), are
-- recorded `lost`. Reads only running runs (partial index triggers_running). Timeouts are bounded
-- (366 days); LEAST keeps a run written before the bound from overflowing the sum.
UPDATE triggers t
SET status = 'lost', finished_at = now(), updated_at = now(),
    message = 'lost: worker ' || COALESCE(t.worker_id, '(unknown)')
              || COALESCE((SELECT CASE WHEN w.stopped_at IS NOT NULL THEN ' stopped at ' || w.stopped_at
                                       ELSE ' sent its last heartbeat at ' || w.last_seen END
                           FROM workers w WHERE w.worker_id = t.worker_id),
                          ' never sent a heartbeat')
              || ' and no result came within the run''s timeout plus ' || $2 || ' ms'
WHERE t.shard = ANY($1::int[]) AND t.status = 'running'
  AND t.started_at < now() - make_interval(secs => (LEAST(t.timeout_ms, 31622400000) + $2::bigint)::float8 / 1000.0)
  AND NOT EXISTS (
      SELECT 1 FROM workers w
      WHERE w.worker_id = t.worker_id AND w.stopped_at IS NULL
        AND w.last_seen >= now() - make_interval(secs => $3::float8 / 1000.0)
  )
RETURNING t.id
