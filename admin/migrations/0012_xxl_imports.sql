-- Which job each imported XXL-JOB job became (`cadenza import xxl-job`, `POST
-- /api/import/xxl-job`), per source installation (`--source`, default `xxl-job`). An import
-- creates only the rows not here yet, so importing the same export again changes nothing; the
-- primary key keeps two concurrent imports from creating a job twice. A deleted job takes its
-- row with it: importing again creates it anew.
CREATE TABLE xxl_imports (
    source      TEXT        NOT NULL,
    xxl_job_id  BIGINT      NOT NULL,
    job_id      BIGINT      NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    imported_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (source, xxl_job_id)
);

CREATE INDEX xxl_imports_job ON xxl_imports (job_id);
