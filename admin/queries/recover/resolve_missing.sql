-- Runs not found on their partition during read-back never landed: send them again.
-- Compare-and-set on the mark the read-back saw (epoch and time): a run that was put back and
-- marked again since (its new send may be in flight) is left alone, and so is one whose delivery
-- was recorded meanwhile.
UPDATE triggers t SET status = 'scheduled', updated_at = now()
FROM UNNEST($1::bigint[], $2::bigint[], $3::timestamptz[]) AS u (id, epoch, marked_at)
WHERE t.id = u.id AND t.status = 'publishing'
  AND t.lease_epoch IS NOT DISTINCT FROM u.epoch AND t.updated_at = u.marked_at
  AND t.id NOT IN (SELECT cadenza_delivered_among($1::bigint[]))
