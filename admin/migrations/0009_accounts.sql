-- Users with roles, personal API tokens, console sessions, the throttle of failed logins, and
-- the audit trail of every write.

-- A user: `admin` (everything), `operator` (writes and reads jobs and runs of the job types its
-- patterns match) or `viewer` (reads them). Patterns are job types with `*` as a wildcard
-- (`billing.*`); an admin's are ignored. The password hash is argon2id in PHC form.
CREATE TABLE users (
    id            BIGSERIAL PRIMARY KEY,
    name          TEXT NOT NULL CHECK (name <> '' AND length(name) <= 100),
    role          TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
    job_types     TEXT[] NOT NULL DEFAULT '{}',
    password_hash TEXT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_name ON users (lower(name));

-- A personal API token, shown once when created. Tokens are 256 random bits, so a SHA-256 of
-- the token is enough to find it and cannot be reversed; `prefix` tells tokens apart in lists.
-- It acts with its owner's role and patterns as they are at each request.
CREATE TABLE api_tokens (
    id           BIGSERIAL PRIMARY KEY,
    user_id      BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         TEXT NOT NULL CHECK (name <> '' AND length(name) <= 100),
    prefix       TEXT NOT NULL,
    hash         BYTEA NOT NULL UNIQUE,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at   TIMESTAMPTZ,
    revoked_at   TIMESTAMPTZ,
    last_used_at TIMESTAMPTZ
);
CREATE INDEX api_tokens_user ON api_tokens (user_id);

-- A console session: the cookie holds the secret, the table its SHA-256; writes made with it
-- must carry `csrf` in the X-CSRF-Token header.
CREATE TABLE sessions (
    hash         BYTEA PRIMARY KEY,
    user_id      BIGINT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    csrf         TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at   TIMESTAMPTZ NOT NULL
);
CREATE INDEX sessions_user ON sessions (user_id);

-- Failed logins per user name and per client address, to slow guessing; shared by all admins.
CREATE TABLE login_failures (
    key       TEXT PRIMARY KEY,
    failures  INT NOT NULL,
    last_at   TIMESTAMPTZ NOT NULL
);

-- The audit trail: who did what, when, from where, with a job's JSON before and after. A
-- refused write is recorded too (`outcome` = 'refused'). Rows take their ids from the run ids'
-- sequence, so the audit is partitioned in the same blocks as `triggers` and dropped with them
-- by retention.
CREATE TABLE audit (
    id       BIGINT NOT NULL DEFAULT nextval('triggers_id_seq'),
    at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    actor    TEXT NOT NULL,
    user_id  BIGINT,
    source   TEXT,
    action   TEXT NOT NULL,
    outcome  TEXT NOT NULL CHECK (outcome IN ('done', 'refused')),
    job_id   BIGINT,
    job_type TEXT,
    target   TEXT,
    before   JSONB,
    after    JSONB,
    detail   TEXT,
    PRIMARY KEY (id)
) PARTITION BY RANGE (id);
CREATE INDEX audit_at ON audit (at DESC);
CREATE INDEX audit_job ON audit (job_id, id DESC) WHERE job_id IS NOT NULL;
CREATE INDEX audit_actor ON audit (actor, id DESC);

-- One audit partition per block of run ids that exists.
DO $$
DECLARE
    span CONSTANT BIGINT := 1099511627776; -- 2^40
    r RECORD;
BEGIN
    FOR r IN SELECT block FROM trigger_partitions ORDER BY block LOOP
        IF r.block = 0 THEN
            EXECUTE format('CREATE TABLE audit_b0 PARTITION OF audit FOR VALUES FROM (MINVALUE) TO (%s)', span);
        ELSE
            EXECUTE format('CREATE TABLE %I PARTITION OF audit FOR VALUES FROM (%s) TO (%s)',
                'audit_b' || r.block, r.block * span, (r.block + 1) * span);
        END IF;
    END LOOP;
END $$;

-- The next block now gets its audit partition too.
CREATE OR REPLACE FUNCTION cadenza_next_trigger_partition() RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE
    span CONSTANT BIGINT := 1099511627776; -- 2^40
    b BIGINT;
    part TEXT;
BEGIN
    SELECT COALESCE(max(block), 0) + 1 INTO b FROM trigger_partitions;
    part := 'triggers_b' || b;
    EXECUTE format('CREATE TABLE %I (LIKE triggers INCLUDING DEFAULTS) WITH (autovacuum_analyze_scale_factor = 0.01, autovacuum_vacuum_scale_factor = 0.02)', part);
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (job_id, fire_time, shard_index) WHERE kind IN (''cron'', ''fix_rate'', ''fix_delay'', ''once'', ''misfire'')', part || '_job_fire_time', part);
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (parent_id) WHERE kind = ''retry''', part || '_one_retry', part);
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (parent_id, job_id, shard_index) WHERE kind = ''child''', part || '_one_child', part);
    EXECUTE format('ALTER TABLE triggers ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', part, b * span, (b + 1) * span);
    EXECUTE format('CREATE TABLE %I PARTITION OF audit FOR VALUES FROM (%s) TO (%s)', 'audit_b' || b, b * span, (b + 1) * span);
    INSERT INTO trigger_partitions (block, name, starts_at) VALUES (b, part, now());
    PERFORM setval('triggers_id_seq', b * span, false);
    RETURN b;
END $$;
