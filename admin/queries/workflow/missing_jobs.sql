-- Of the job ids $1, those that do not exist, and those whose route is sharding_broadcast.
SELECT u.id, j.id IS NULL AS missing
FROM UNNEST($1::bigint[]) AS u (id)
LEFT JOIN jobs j ON j.id = u.id
WHERE j.id IS NULL OR j.route = 'sharding_broadcast'
