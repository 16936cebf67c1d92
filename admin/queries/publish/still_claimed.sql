-- Of runs written claimed whose job changed since they were written (plan_gen moved on), those
-- still there and still marked under the epoch they were written under. A job change drops the
-- runs due later than the publish-ahead plus a guard; the rest are sent as they were written.
SELECT t.id
FROM triggers t
JOIN UNNEST($1::bigint[], $2::bigint[]) AS u (id, epoch) ON t.id = u.id
WHERE t.status = 'publishing' AND t.lease_epoch = u.epoch
