INSERT INTO job_types (job_type, topic, partitions) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING
