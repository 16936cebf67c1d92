//! Importing XXL-JOB job definitions, as a user migrating from XXL-JOB does it: through the API
//! with rows they read themselves, and with the `cadenza` CLI from a `mysql --batch` export.
//!
//! The fixtures in `fixtures/xxl/` are one XXL-JOB 2.4 installation exported two ways:
//! `jobs.tsv` and `groups.tsv` as `mysql --batch -e 'select * from …'` writes them, and
//! `export.json` (`{"xxl_job_info": […], "xxl_job_group": […]}`) with the same ten jobs: every
//! route and block strategy, both misfire strategies, CRON, FIX_RATE and NONE, children (a chain
//! and a diamond), a GLUE_SHELL script, running and stopped jobs. `jobs_bad.tsv` and
//! `export_bad.json` hold rows that cannot be imported: a malformed row, an unknown strategy, a
//! child outside the file, two jobs that are each other's child, a GLUE_GROOVY job, next to a row
//! that would be fine alone.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cadenza_integration::{run_cli, ApiClient, CliOut, Cluster};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

fn fixture(name: &str) -> PathBuf {
    cadenza_integration::manifest_dir()
        .join("tests/fixtures/xxl")
        .join(name)
}

fn read_json(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(name)).unwrap()).unwrap()
}

/// The import request a client builds from a JSON export holding both tables.
fn request(export: &Value, extra: Value) -> Value {
    let mut body = json!({
        "jobs": export["xxl_job_info"],
        "groups": export["xxl_job_group"],
        "timezone": "Asia/Shanghai",
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// Every job the caller can see.
async fn jobs(api: &ApiClient) -> Vec<Value> {
    let (status, page) = api.get_json("/api/jobs?limit=1000").await.unwrap();
    assert_eq!(status, 200, "{page}");
    page["jobs"].as_array().unwrap().clone()
}

/// The audit entries of imports.
async fn import_audits(api: &ApiClient) -> Vec<Value> {
    let (status, page) = api.get_json("/api/audit?limit=1000").await.unwrap();
    assert_eq!(status, 200, "{page}");
    page["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["action"] == "job.import")
        .cloned()
        .collect()
}

/// The report's row of XXL-JOB job `xxl_id`.
fn row(report: &Value, xxl_id: i64) -> &Value {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["xxl_id"] == xxl_id)
        .unwrap_or_else(|| panic!("no row of xxl id {xxl_id} in {report}"))
}

/// `column: message` of each error of a row.
fn errors(r: &Value) -> Vec<String> {
    r["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{}: {}",
                e["column"].as_str().unwrap(),
                e["message"].as_str().unwrap()
            )
        })
        .collect()
}

const SERVE: [&str; 10] = [
    "--serve shell=shell",
    "--serve xxl.billing-app.invoiceJobHandler=xxl:billing-app/invoiceJobHandler",
    "--serve xxl.billing-app.ledgerSyncHandler=xxl:billing-app/ledgerSyncHandler",
    "--serve xxl.billing-app.mailJobHandler=xxl:billing-app/mailJobHandler",
    "--serve xxl.billing-app.reconcileHandler=xxl:billing-app/reconcileHandler",
    "--serve xxl.report-app.cacheWarmHandler=xxl:report-app/cacheWarmHandler",
    "--serve xxl.report-app.dashboardHandler=xxl:report-app/dashboardHandler",
    "--serve xxl.report-app.exportShardHandler=xxl:report-app/exportShardHandler",
    "--serve xxl.report-app.monthEndHandler=xxl:report-app/monthEndHandler",
    "--serve xxl.report-app.probeHandler=xxl:report-app/probeHandler",
];

#[tokio::test]
async fn an_xxl_job_export_becomes_jobs_through_the_api() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let _worker = cluster
        .spawn_worker("shell=shell", "import", &[])
        .await
        .unwrap();
    let api = &admin.api();
    let export = read_json("export.json");

    // A dry run reports every row and writes nothing.
    let (status, dry) = api
        .post_json(
            "/api/import/xxl-job",
            &request(&export, json!({"dry_run": true})),
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{dry}");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(
        (dry["create"].as_i64(), dry["errors"].as_i64()),
        (Some(10), Some(0)),
        "{dry}"
    );
    assert!(dry["rows"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["outcome"] == "create" && r["job_id"].is_null()));
    assert_eq!(dry["serve"], json!(SERVE));
    assert_eq!(
        row(&dry, 1)["children"],
        json!([{"xxl_id": 2, "job_id": null}, {"xxl_id": 3, "job_id": null}])
    );
    assert!(jobs(api).await.is_empty(), "a dry run creates nothing");
    assert!(import_audits(api).await.is_empty());

    // The import.
    let (status, report) = api
        .post_json("/api/import/xxl-job", &request(&export, json!({})))
        .await
        .unwrap();
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        (report["dry_run"].as_bool(), report["create"].as_i64()),
        (Some(false), Some(10))
    );
    let id: BTreeMap<i64, i64> = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["xxl_id"].as_i64().unwrap(), r["job_id"].as_i64().unwrap()))
        .collect();
    assert_eq!(id.len(), 10);
    assert_eq!(jobs(api).await.len(), 10);

    // Each job as the API shows it.
    let job = |xxl: i64| {
        let path = format!("/api/jobs/{}", id[&xxl]);
        async move {
            let (status, j) = api.get_json(&path).await.unwrap();
            assert_eq!(status, 200, "{j}");
            j
        }
    };
    let invoices = job(1).await;
    assert_eq!(invoices["name"], "Nightly invoices");
    assert_eq!(invoices["job_type"], "xxl.billing-app.invoiceJobHandler");
    assert_eq!(
        invoices["schedule"],
        json!({"kind": "cron", "expr": "0 0 2 * * ?", "timezone": "Asia/Shanghai"})
    );
    assert_eq!(
        (&invoices["route"], &invoices["block"], &invoices["misfire"]),
        (
            &json!("first"),
            &json!("serial_execution"),
            &json!("do_nothing")
        )
    );
    assert_eq!(invoices["misfire_threshold_ms"], 5000);
    // Quartz's specials come over unchanged.
    assert_eq!(job(8).await["schedule"]["expr"], "0 0 10 ? * 6#3");
    assert_eq!(job(4).await["schedule"]["expr"], "0 0 0 L-2 * ?");
    assert_eq!(invoices["params"], "--since=yesterday");
    assert_eq!(
        (
            invoices["timeout_ms"].as_i64(),
            invoices["retries"].as_i64()
        ),
        (Some(600_000), Some(2))
    );
    assert_eq!(invoices["children"], json!([id[&2], id[&3]]));
    assert_eq!(
        invoices["alarm_emails"],
        json!(["billing-ops@example.com", "finance@example.com"])
    );
    assert_eq!(invoices["enabled"], true);
    assert!(
        invoices["next_fire_at"].is_string(),
        "a running XXL job fires: {invoices}"
    );

    let mails = job(2).await;
    assert_eq!(mails["schedule"], json!({"kind": "none"}));
    assert_eq!(
        (&mails["route"], &mails["block"]),
        (&json!("round"), &json!("discard_later"))
    );
    assert_eq!(mails["enabled"], false, "trigger_status 0: stopped");
    assert!(mails["next_fire_at"].is_null());
    assert_eq!(mails["children"], json!([id[&4]]));

    let ledger = job(3).await;
    assert_eq!(
        ledger["schedule"],
        json!({"kind": "fix_rate", "every_ms": 300_000})
    );
    assert_eq!(
        (&ledger["misfire"], &ledger["route"], &ledger["block"]),
        (
            &json!("fire_once_now"),
            &json!("consistent_hash"),
            &json!("cover_early")
        )
    );
    assert_eq!(ledger["params"], "", "a NULL executor_param is no params");
    assert_eq!(
        ledger["children"],
        json!([id[&4]]),
        "a diamond: 1 → 2 → 4 and 1 → 3 → 4"
    );

    let export_job = job(5).await;
    assert_eq!(export_job["route"], "sharding_broadcast");
    assert_eq!(export_job["schedule"]["expr"], "0 30 1 ? * MON-FRI");
    assert_eq!(export_job["params"], "bucket=exports\tformat=csv");

    let cleanup = job(6).await;
    assert_eq!(cleanup["job_type"], "shell");
    assert_eq!(
        (cleanup["route"].as_str(), cleanup["timeout_ms"].as_i64()),
        (Some("failover"), Some(60_000))
    );
    assert_eq!(cleanup["enabled"], false);
    assert!(
        cleanup["params"]
            .as_str()
            .unwrap()
            .starts_with("exec bash -c '#!/bin/bash\n"),
        "{cleanup}"
    );

    let month_end = job(10).await;
    assert_eq!(month_end["route"], "busyover");
    assert_eq!(month_end["children"], json!([id[&1], id[&8]]));

    let routes: BTreeSet<String> = jobs(api)
        .await
        .iter()
        .map(|j| j["route"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(routes.len(), 10, "every XXL-JOB route strategy: {routes:?}");

    // The GLUE_SHELL script runs on a worker serving `shell`, with XXL-JOB's arguments.
    let run = api.trigger_now(id[&6]).await.unwrap();
    let done = api.wait_run_status(run, "succeeded", WAIT).await.unwrap();
    let log = done["log"].as_str().unwrap();
    assert!(
        log.contains("cleaning files older than 7 days (shard 0 of 1)"),
        "{done}"
    );
    assert!(log.contains("done: it's clean"), "{done}");

    let audits = import_audits(api).await;
    assert_eq!(audits.len(), 1, "one audit entry per import: {audits:?}");
    assert_eq!(audits[0]["after"]["created"].as_array().unwrap().len(), 10);

    // Importing the same rows again changes nothing.
    let (status, again) = api
        .post_json("/api/import/xxl-job", &request(&export, json!({})))
        .await
        .unwrap();
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        (again["create"].as_i64(), again["already_imported"].as_i64()),
        (Some(0), Some(10))
    );
    for (xxl, job_id) in &id {
        let r = row(&again, *xxl);
        assert_eq!(
            (&r["outcome"], r["job_id"].as_i64()),
            (&json!("already_imported"), Some(*job_id))
        );
    }
    assert_eq!(
        again["serve"],
        json!(SERVE),
        "the serve lines are still listed"
    );
    assert_eq!(jobs(api).await.len(), 10);
    assert_eq!(
        import_audits(api).await.len(),
        1,
        "an import that changes nothing is not audited"
    );
    assert_eq!(job(1).await, invoices, "the job is untouched");

    // Another XXL-JOB installation with the same ids is another source.
    let (status, other) = api
        .post_json(
            "/api/import/xxl-job",
            &request(&export, json!({"source": "xxl-staging", "dry_run": true})),
        )
        .await
        .unwrap();
    assert_eq!(
        (status.as_u16(), other["create"].as_i64()),
        (200, Some(10)),
        "{other}"
    );

    // Two imports of the same rows at once create them once.
    let race = request(&export, json!({"source": "xxl-race"}));
    let (a, b) = tokio::join!(
        api.post_json("/api/import/xxl-job", &race),
        api.post_json("/api/import/xxl-job", &race)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!((a.0.as_u16(), b.0.as_u16()), (200, 200), "{} {}", a.1, b.1);
    let mut created = [a.1["create"].as_i64(), b.1["create"].as_i64()];
    created.sort_unstable();
    assert_eq!(created, [Some(0), Some(10)], "{} {}", a.1, b.1);
    assert_eq!(jobs(api).await.len(), 20);
    assert_eq!(import_audits(api).await.len(), 2);

    // A file with rows that cannot be imported: each is named, and nothing is written.
    let bad = read_json("export_bad.json");
    for dry_run in [true, false] {
        let (status, answer) = api
            .post_json(
                "/api/import/xxl-job",
                &request(&bad, json!({"dry_run": dry_run})),
            )
            .await
            .unwrap();
        let report = if dry_run {
            assert_eq!(status, 200, "{answer}");
            answer
        } else {
            assert_eq!(status, 422, "{answer}");
            assert_eq!(answer["error"]["code"], "import_rejected");
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("6 of 7 rows cannot be imported"),
                "{answer}"
            );
            answer["report"].clone()
        };
        assert_eq!(report["errors"], 6, "{report}");
        for loop_id in [21, 22] {
            let e = errors(row(&report, loop_id)).join("\n");
            assert!(
                e.contains("child_jobid: would make a cycle of child jobs"),
                "{e}"
            );
        }
        let malformed = &report["rows"][2];
        assert!(malformed["xxl_id"].is_null());
        assert_eq!(
            errors(malformed),
            ["id: \"twenty-three\" is not a whole number"]
        );
        assert_eq!(
            errors(row(&report, 24)),
            [
                "executor_route_strategy: unknown route strategy \"SOMETIMES\"; expected one of: \
              FIRST, LAST, ROUND, RANDOM, CONSISTENT_HASH, LEAST_FREQUENTLY_USED, \
              LEAST_RECENTLY_USED, FAILOVER, BUSYOVER, SHARDING_BROADCAST"
            ]
        );
        let orphan = errors(row(&report, 25)).join("\n");
        assert!(
            orphan.starts_with("child_jobid: child job 99 is not in this export"),
            "{orphan}"
        );
        let groovy = errors(row(&report, 26)).join("\n");
        assert!(
            groovy.starts_with(
                "glue_type: needs a handler: GLUE_GROOVY source cannot run in Cadenza"
            ) && groovy.contains("--handler job:26="),
            "{groovy}"
        );
        assert_eq!(row(&report, 27)["outcome"], "create");
    }
    assert_eq!(jobs(api).await.len(), 20, "a refused import writes nothing");
    assert_eq!(import_audits(api).await.len(), 2);

    // A request the import cannot even read is refused naming the field.
    let (status, answer) = api
        .post_json(
            "/api/import/xxl-job",
            &request(&export, json!({"timezone": "Mars/Olympus"})),
        )
        .await
        .unwrap();
    assert_eq!(
        (status.as_u16(), &answer["error"]["field"]),
        (422, &json!("timezone")),
        "{answer}"
    );
}

/// Runs `cadenza args…` against the admin (the fixtures are given by path).
async fn cadenza(admin_url: &str, token: &str, args: &[&str]) -> CliOut {
    let env = [("CADENZA_URL", admin_url), ("CADENZA_API_TOKEN", token)];
    run_cli(&std::env::temp_dir(), &env, args).await.unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[tokio::test]
async fn the_cli_imports_a_mysql_batch_export() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = &admin.api();
    let url = admin.base_url().to_owned();
    let token = cluster.token().to_owned();
    let run = |args: Vec<&str>| {
        let (url, token) = (url.clone(), token.clone());
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cadenza(&url, &token, &args).await
        }
    };
    let (tsv, groups, json_export, bad) = (
        fixture("jobs.tsv"),
        fixture("groups.tsv"),
        fixture("export.json"),
        fixture("jobs_bad.tsv"),
    );

    // Dry run: a table of every row, the worker options, nothing written.
    let dry = run(vec![
        "import",
        "xxl-job",
        path(&tsv),
        "--groups",
        path(&groups),
        "--timezone",
        "Asia/Shanghai",
        "--dry-run",
    ])
    .await;
    assert_eq!(dry.code, 0, "{}\n{}", dry.stdout, dry.stderr);
    for name in [
        "Nightly invoices",
        "Send invoice e-mails",
        "Ledger sync",
        "Refresh dashboards",
        "Partitioned export",
        "Clean up old exports",
        "Warm caches",
        "Reconcile payments",
        "Probe a random node",
        "Month-end report",
    ] {
        assert!(dry.stdout.contains(name), "{name}: {}", dry.stdout);
    }
    assert!(
        dry.stdout.contains(" line 2 "),
        "rows are named by line: {}",
        dry.stdout
    );
    // One `--serve` option per line after `cadenza-worker \`, ready to paste.
    let serve_lines: Vec<&str> = dry
        .stdout
        .lines()
        .skip_while(|l| !l.contains("cadenza-worker"))
        .skip(1)
        .take(SERVE.len())
        .map(|l| l.trim().trim_end_matches(" \\"))
        .collect();
    assert_eq!(serve_lines, SERVE, "{}", dry.stdout);
    assert!(
        dry.stdout.contains("dry run: 10 to create, 0 already imported, 0 cannot be imported; nothing was written (cron in Asia/Shanghai)"),
        "{}",
        dry.stdout
    );
    assert!(jobs(api).await.is_empty());

    // The tab-separated and the JSON export give the same jobs.
    let as_json = |file: PathBuf, groups: Option<PathBuf>| {
        let run = &run;
        async move {
            let mut args = vec![
                "import".to_owned(),
                "xxl-job".into(),
                path(&file).into(),
                "--dry-run".into(),
                "--json".into(),
                "--source".into(),
                "compare".into(),
            ];
            if let Some(g) = &groups {
                args.extend(["--groups".to_owned(), path(g).to_owned()]);
            }
            let out = run(args.iter().map(String::as_str).collect()).await;
            assert_eq!(out.code, 0, "{}", out.stderr);
            let v: Value = serde_json::from_str(&out.stdout).unwrap();
            v["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["job"].clone())
                .collect::<Vec<_>>()
        }
    };
    let from_tsv = as_json(tsv.clone(), Some(groups.clone())).await;
    let from_json = as_json(json_export.clone(), None).await;
    assert_eq!(from_tsv.len(), 10);
    assert_eq!(from_tsv, from_json);

    // The import.
    let real = run(vec![
        "import",
        "xxl-job",
        path(&tsv),
        "--groups",
        path(&groups),
        "--timezone",
        "Asia/Shanghai",
    ])
    .await;
    assert_eq!(real.code, 0, "{}\n{}", real.stdout, real.stderr);
    assert!(
        real.stdout
            .contains("imported 10 jobs from source \"xxl-job\""),
        "{}",
        real.stdout
    );
    let all = jobs(api).await;
    assert_eq!(all.len(), 10);
    let shell = all
        .iter()
        .find(|j| j["name"] == "Clean up old exports")
        .unwrap();
    let params = shell["params"].as_str().unwrap();
    assert!(
        params.contains("\necho \"cleaning files older than $1 days (shard $2 of $3)\"\n"),
        "the script's line breaks are unescaped: {params}"
    );

    // The same installation exported as JSON: every job is there already.
    let again = run(vec![
        "import",
        "xxl-job",
        path(&json_export),
        "--timezone",
        "Asia/Shanghai",
    ])
    .await;
    assert_eq!(again.code, 0, "{}\n{}", again.stdout, again.stderr);
    assert!(
        again
            .stdout
            .contains("imported 0 jobs from source \"xxl-job\" (10 imported before"),
        "{}",
        again.stdout
    );
    assert_eq!(
        again.stdout.matches("already_imported").count(),
        10,
        "{}",
        again.stdout
    );
    assert_eq!(jobs(api).await.len(), 10);

    // Bad rows: each named with its line and column, in a dry run and a refused import.
    for extra in [vec!["--dry-run"], vec![]] {
        let mut args = vec!["import", "xxl-job", path(&bad), "--groups", path(&groups)];
        args.extend(extra);
        let out = run(args).await;
        assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
        for expected in [
            "jobs_bad.tsv line 4: malformed row: it has 4 fields and the header 24",
            "jobs_bad.tsv line 5 (xxl id 24): executor_route_strategy: unknown route strategy \"SOMETIMES\"",
            "jobs_bad.tsv line 6 (xxl id 25): child_jobid: child job 99 is not in this export",
            "jobs_bad.tsv line 2 (xxl id 21): child_jobid: would make a cycle of child jobs: 21 → 22 → 21",
            "jobs_bad.tsv line 7 (xxl id 26): glue_type: needs a handler: GLUE_GROOVY source cannot run in Cadenza",
            "6 rows cannot be imported (listed above); nothing was imported",
        ] {
            assert!(out.stderr.contains(expected), "{expected:?} in:\n{}", out.stderr);
        }
        assert!(out.stdout.contains("cannot be imported"), "{}", out.stdout);
    }
    assert_eq!(
        jobs(api).await.len(),
        10,
        "nothing of the bad file was written"
    );

    // Without the groups, BEAN jobs need a mapping: the message says how.
    let no_groups = run(vec![
        "import",
        "xxl-job",
        path(&tsv),
        "--dry-run",
        "--source",
        "fresh",
    ])
    .await;
    assert_eq!(no_groups.code, 1, "{}", no_groups.stdout);
    assert!(
        no_groups
            .stderr
            .contains("job_group: no xxl_job_group rows were given")
            && no_groups.stderr.contains("--groups FILE"),
        "{}",
        no_groups.stderr
    );
    // A file that is no export at all.
    let wrong = run(vec![
        "import",
        "xxl-job",
        path(&groups),
        "--dry-run",
        "--source",
        "x",
    ])
    .await;
    assert_eq!(wrong.code, 1, "{}", wrong.stderr);
    assert!(
        wrong.stderr.contains("missing column job_desc"),
        "{}",
        wrong.stderr
    );
}
