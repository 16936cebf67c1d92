UPDATE alarms SET status = 'sent', sent_at = now(), last_error = NULL WHERE id = $1
