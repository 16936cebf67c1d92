SELECT partitions FROM job_types WHERE job_type = $1
