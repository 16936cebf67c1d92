-- One alarm per channel and target for each failed run among $1 (failed, timed_out, lost) of a
-- job with alarm targets; delivered later by the alarm sender.
INSERT INTO alarms (trigger_id, job_id, channel, target)
SELECT t.id, t.job_id, a.channel, a.target
FROM triggers t
JOIN jobs j ON j.id = t.job_id
CROSS JOIN LATERAL (
    SELECT 'webhook' AS channel, j.alarm_webhook AS target WHERE j.alarm_webhook IS NOT NULL
    UNION ALL
    SELECT 'email', e FROM UNNEST(j.alarm_emails) AS e
) a
WHERE t.id = ANY($1::bigint[]) AND t.status IN ('failed', 'timed_out', 'lost')
ORDER BY t.id
ON CONFLICT DO NOTHING
