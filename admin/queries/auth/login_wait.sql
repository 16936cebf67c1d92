-- Seconds a sign-in must still wait: after $2 failures of a key (a user name or a client
-- address), 1 s, then doubling per further failure, at most $3 s, counted from the last one.
SELECT max(EXTRACT(EPOCH FROM (
           last_at + make_interval(secs => LEAST($3, power(2, failures - $2))) - now()
       )))::float8
FROM login_failures
WHERE key = ANY($1) AND failures >= $2
