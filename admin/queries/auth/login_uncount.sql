-- Takes back an attempt counted against keys $1: it succeeded, or its password was never
-- checked (no hashing slot came free).
UPDATE login_failures SET failures = GREATEST(failures - 1, 0) WHERE key = ANY($1)
