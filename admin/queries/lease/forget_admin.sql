DELETE FROM admins WHERE admin_id = $1 OR last_seen < now() - interval '1 day'
