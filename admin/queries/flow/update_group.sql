-- Changes concurrency group $1's limit ($2) and rate ($3 a second, burst $4).
UPDATE concurrency_groups
SET "limit" = $2, rate_per_second = $3, rate_burst = $4, updated_at = now()
WHERE name = $1
