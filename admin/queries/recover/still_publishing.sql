-- Of the runs a read-back is about to resolve, those still `publishing` under the mark it saw
-- (epoch and time), as its compare-and-set will require, and not delivered: one the recorder
-- recorded meanwhile, a worker started, a cancel ended or a new take marked again is left alone.
SELECT t.id
FROM triggers t
JOIN UNNEST($1::bigint[], $2::bigint[], $3::timestamptz[]) AS u (id, epoch, marked_at)
  ON t.id = u.id
WHERE t.status = 'publishing' AND t.lease_epoch IS NOT DISTINCT FROM u.epoch
  AND t.updated_at = u.marked_at
  AND t.id NOT IN (SELECT cadenza_delivered_among($1::bigint[]))
