-- Of the runs a read-back is about to resolve, those still `publishing` under the epoch it saw
-- them with: one the recorder recorded meanwhile is left alone.
SELECT t.id
FROM triggers t
JOIN UNNEST($1::bigint[], $2::bigint[]) AS u (id, epoch) ON t.id = u.id
WHERE t.status = 'publishing' AND t.lease_epoch IS NOT DISTINCT FROM u.epoch
