-- Releases the queued runs $1: `scheduled` from now on (their misfire threshold counts from
-- `released_at`), announced to their shard's holder, who publishes them as any other run.
UPDATE triggers
SET status = 'scheduled', released_at = now(), updated_at = now()
WHERE id = ANY($1::bigint[]) AND status = 'queued'
RETURNING id, pg_notify('cadenza_trigger', shard || ':' || id) IS NOT NULL AS notified,
          EXTRACT(EPOCH FROM now() - fire_time)::float8 AS waited_s
