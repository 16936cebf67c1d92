-- Of the runs this admin marked `publishing` and has not seen delivered, those still
-- `publishing` and not in the delivery record: the read-back resolves them. The others (resolved,
-- started, ended, dropped, or recorded after all) no longer hold their shard's settled mark back.
SELECT t.id
FROM triggers t
WHERE t.id = ANY($1::bigint[]) AND t.status = 'publishing'
  AND t.id NOT IN (SELECT cadenza_delivered_among($1::bigint[]))
