-- `log` events (live log lines of running runs), batched, at most one per run per statement:
-- each batch number is appended once, in order; the log keeps its last 64 KiB.
UPDATE triggers t
SET log = right(CASE WHEN t.log IS NULL OR t.log = '' THEN u.lines
                     ELSE t.log || E'\n' || u.lines END, 65536),
    log_seq = u.seq, updated_at = now()
FROM UNNEST($1::bigint[], $2::int[], $3::bigint[], $4::text[]) AS u (id, attempt, seq, lines)
WHERE t.id = u.id AND t.status = 'running' AND t.attempt = u.attempt AND t.log_seq < u.seq
