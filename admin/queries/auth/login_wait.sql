-- Seconds a sign-in must still wait: after $2 failures of a key (a user name or a client
-- address), 1 s, then doubling per further failure, at most $3 s, counted from the last one.
-- The keys' rows are locked (in key order, so two sign-ins never wait on each other in a
-- circle) until the attempt is counted: concurrent sign-ins are counted one after another and
-- cannot all pass a throttle that the first of them fills.
SELECT max(wait)::float8
FROM (
    SELECT EXTRACT(EPOCH FROM (
               last_at + make_interval(secs => LEAST($3, power(2, failures - $2))) - now()
           )) AS wait,
           failures
    FROM login_failures
    WHERE key = ANY($1)
    ORDER BY key
    FOR UPDATE
) AS locked
WHERE failures >= $2
