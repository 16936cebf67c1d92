//! The `cadenza` CLI against a running admin: jobs, trigger, runs (tail), workers, replay, the
//! config file, and errors that name what is wrong.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::path::Path;
use std::time::Duration;

use cadenza_integration::{cadenza_bin, run_cli, CliOut, Cluster};
use chrono::Utc;
use serde_json::Value;

/// Runs `cadenza args…` with `HOME` = `home` (so only its config file is read) and `env`.
async fn cadenza(home: &Path, env: &[(&str, &str)], args: &[&str]) -> CliOut {
    run_cli(home, env, args).await.unwrap()
}

#[tokio::test]
async fn the_cli_round_trips_against_a_running_admin() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let worker = cluster
        .spawn_worker("cli.echo=shell", "cli", &[])
        .await
        .unwrap();
    let home = cluster.dir().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let url = admin.base_url().to_owned();
    let env = [
        ("CADENZA_URL", url.as_str()),
        ("CADENZA_API_TOKEN", cluster.token()),
    ];
    let run = |args: &'static [&'static str]| cadenza(&home, &env, args);

    // Create from flags; --json gives the API's answer.
    let created = cadenza(
        &home,
        &env,
        &[
            "jobs",
            "create",
            "--name",
            "hello",
            "--job-type",
            "cli.echo",
            "--schedule",
            "none",
            "--params",
            "echo hi; sleep 1; echo bye",
            "--retries",
            "1",
            "--json",
        ],
    )
    .await;
    assert_eq!(created.code, 0, "{}", created.stderr);
    let job = created.json();
    let id = job["id"].as_i64().unwrap().to_string();
    assert_eq!(job["retries"], 1);

    let list = run(&["jobs", "list"]).await;
    assert_eq!(list.code, 0, "{}", list.stderr);
    assert!(
        list.stdout.contains("hello") && list.stdout.contains("cli.echo"),
        "{}",
        list.stdout
    );
    assert!(
        list.stdout.contains("NAME"),
        "a table with a header: {}",
        list.stdout
    );

    let show = cadenza(&home, &env, &["jobs", "show", &id, "--json"]).await;
    assert_eq!(show.json()["name"], "hello");

    let triggered = cadenza(&home, &env, &["jobs", "trigger", &id, "--json"]).await;
    assert_eq!(triggered.code, 0, "{}", triggered.stderr);
    let run_id = triggered.json()["trigger_ids"][0]
        .as_i64()
        .unwrap()
        .to_string();

    // Follow the log until the run ends.
    let tail = cadenza(&home, &env, &["runs", "tail", &run_id, "--every-ms", "100"]).await;
    assert_eq!(tail.code, 0, "{}", tail.stderr);
    assert!(
        tail.stdout.contains("hi") && tail.stdout.contains("bye"),
        "{}",
        tail.stdout
    );
    assert!(tail.stderr.contains("succeeded"), "{}", tail.stderr);

    let runs = cadenza(&home, &env, &["runs", "list", "--job-id", &id]).await;
    assert!(
        runs.stdout.contains("succeeded") && runs.stdout.contains(&run_id),
        "{}",
        runs.stdout
    );
    let one = cadenza(&home, &env, &["runs", "show", &run_id, "--json"]).await;
    assert_eq!(one.json()["status"], "succeeded");
    // An ended run cannot be cancelled: the admin's reason, and nothing changes.
    let late = cadenza(&home, &env, &["runs", "cancel", &run_id]).await;
    assert_eq!(late.code, 1, "{}", late.stdout);
    assert!(
        late.stderr.contains("not_cancellable") && late.stderr.contains("already ended"),
        "{}",
        late.stderr
    );
    // A run due in a minute is cancelled at once and never runs.
    let due = cadenza(
        &home,
        &env,
        &["jobs", "trigger", &id, "--delay-ms", "60000", "--json"],
    )
    .await;
    assert_eq!(due.code, 0, "{}", due.stderr);
    let due_id = due.json()["trigger_ids"][0].to_string();
    let cancelled = cadenza(&home, &env, &["runs", "cancel", &due_id]).await;
    assert_eq!(cancelled.code, 0, "{}", cancelled.stderr);
    assert!(
        cancelled
            .stderr
            .contains(&format!("[run {due_id} cancelled]")),
        "{}",
        cancelled.stderr
    );
    assert!(
        cancelled.stdout.contains("cancelled by"),
        "{}",
        cancelled.stdout
    );

    let workers = run(&["workers"]).await;
    assert!(workers.stdout.contains(worker.id()), "{}", workers.stdout);

    let disabled = cadenza(&home, &env, &["jobs", "disable", &id]).await;
    assert_eq!(disabled.code, 0);
    assert!(disabled.stdout.contains("disabled"));
    let enabled = cadenza(&home, &env, &["jobs", "enable", &id, "--json"]).await;
    assert_eq!(enabled.json()["enabled"], true);

    // The audit shows what was done, newest first.
    let audit = cadenza(&home, &env, &["audit", "--job-id", &id]).await;
    assert_eq!(audit.code, 0, "{}", audit.stderr);
    let lines: Vec<&str> = audit.stdout.lines().collect();
    assert!(
        lines[0].contains("ACTOR") && lines[0].contains("ACTION"),
        "{}",
        audit.stdout
    );
    for (line, action) in lines[1..].iter().zip([
        "job.enable",
        "job.disable",
        "run.cancel",
        "job.trigger",
        "job.trigger",
        "job.create",
    ]) {
        assert!(
            line.contains(action) && line.contains("service"),
            "{}",
            audit.stdout
        );
    }

    // Replay the run: a dry run lists it, the replay runs it again.
    let from = (Utc::now() - chrono::Duration::minutes(5)).to_rfc3339();
    let to = (Utc::now() + chrono::Duration::seconds(1)).to_rfc3339();
    let window = [
        "replay",
        "--job-type",
        "cli.echo",
        "--from",
        &from,
        "--to",
        &to,
    ];
    let dry = cadenza(&home, &env, &[&window[..], &["--dry-run"]].concat()).await;
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        dry.stdout.contains("1 runs would be replayed"),
        "{}",
        dry.stdout
    );
    let done = cadenza(&home, &env, &window).await;
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert!(done.stdout.contains("replayed 1 runs"), "{}", done.stdout);

    // Bad input names what is wrong, and changes nothing.
    let bad = run(&[
        "jobs",
        "create",
        "--name",
        "x",
        "--job-type",
        "cli.echo",
        "--schedule",
        "fix_rate:often",
    ])
    .await;
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("--schedule") && bad.stderr.contains("often"),
        "{}",
        bad.stderr
    );
    let bad = run(&[
        "jobs",
        "create",
        "--name",
        "x",
        "--job-type",
        "bad type!",
        "--schedule",
        "none",
    ])
    .await;
    assert_eq!(bad.code, 1);
    assert!(bad.stderr.contains("job_type"), "{}", bad.stderr);
    let bad = run(&["jobs", "create", "--name", "x", "--schedule", "none"]).await;
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("--job-type"), "{}", bad.stderr);
    let bad = run(&["runs", "show", "999999"]).await;
    assert_eq!(bad.code, 1);
    assert!(bad.stderr.contains("not_found"), "{}", bad.stderr);
    let backwards = cadenza(
        &home,
        &env,
        &[
            "replay",
            "--job-type",
            "cli.echo",
            "--from",
            &to,
            "--to",
            &from,
        ],
    )
    .await;
    assert_eq!(backwards.code, 2);
    assert!(backwards.stderr.contains("--from"), "{}", backwards.stderr);
    let list = cadenza(&home, &env, &["jobs", "list", "--json"]).await;
    assert_eq!(
        list.json()["jobs"].as_array().unwrap().len(),
        1,
        "nothing was created"
    );

    // No token: the admin refuses, and the CLI says where a token comes from.
    let anon = cadenza(&home, &[("CADENZA_URL", url.as_str())], &["jobs", "list"]).await;
    assert_eq!(anon.code, 1);
    assert!(
        anon.stderr.contains("unauthorized") && anon.stderr.contains("CADENZA_API_TOKEN"),
        "{}",
        anon.stderr
    );
    // The config file gives URL and token.
    let dir = home.join(".config").join("cadenza");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        format!("url = \"{url}\"\ntoken = \"{}\"\n", cluster.token()),
    )
    .unwrap();
    let from_file = cadenza(&home, &[], &["jobs", "list"]).await;
    assert_eq!(from_file.code, 0, "{}", from_file.stderr);
    assert!(from_file.stdout.contains("hello"));
    std::fs::write(dir.join("config.toml"), "token = 3\n").unwrap();
    let broken = cadenza(&home, &[], &["jobs", "list"]).await;
    assert_eq!(broken.code, 2);
    assert!(broken.stderr.contains("config.toml"), "{}", broken.stderr);
    std::fs::remove_file(dir.join("config.toml")).unwrap();

    let deleted = cadenza(&home, &env, &["jobs", "delete", &id]).await;
    assert_eq!(deleted.code, 0, "{}", deleted.stderr);
    let gone = cadenza(&home, &env, &["jobs", "show", &id]).await;
    assert_eq!(gone.code, 1);
}

/// Runs `cadenza args…` with its stdout read by nobody (the reader of `| head` gone): the exit
/// code (`None` when a signal ended it) and stderr.
async fn cadenza_into_closed_pipe(
    home: &Path,
    env: &[(&str, &str)],
    args: &[&str],
) -> (Option<i32>, Option<i32>, String) {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let mut cmd = tokio::process::Command::new(cadenza_bin("cadenza").unwrap());
    cmd.args(args)
        .env("HOME", home)
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("CADENZA_CONFIG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    // Close the only read end before the command has anything to write.
    drop(child.stdout.take());
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("cadenza finished within 60 s")
        .unwrap();
    (
        out.status.code(),
        out.status.signal(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn every_command_ends_quietly_when_its_reader_goes_away() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let _worker = cluster
        .spawn_worker("cli.echo=shell", "cli", &[])
        .await
        .unwrap();
    let home = cluster.dir().join("home-pipe");
    std::fs::create_dir_all(&home).unwrap();
    let url = admin.base_url().to_owned();
    let env = [
        ("CADENZA_URL", url.as_str()),
        ("CADENZA_API_TOKEN", cluster.token()),
    ];
    let api = admin.api();
    let job = api
        .create_job(
            &serde_json::json!({"name": "talkative", "job_type": "cli.echo",
            "schedule": {"kind": "none"}, "params": "seq 1 2000"}),
        )
        .await
        .unwrap();
    let run = api.trigger_now(job).await.unwrap();
    api.wait_run_status(run, "succeeded", Duration::from_secs(60))
        .await
        .unwrap();
    let definition = serde_json::json!({"name": "piped", "schedule": {"kind": "none"},
        "nodes": [{"key": "a", "job_id": job}, {"key": "b", "job_id": job, "parents": ["a"]}]});
    let (status, workflow) = api.post_json("/api/workflows", &definition).await.unwrap();
    assert_eq!(status, 201, "{workflow}");
    let workflow = workflow["id"].to_string();
    let (status, workflow_run) = api
        .post_empty(&format!("/api/workflows/{workflow}/trigger"))
        .await
        .unwrap();
    assert_eq!(status, 201, "{workflow_run}");
    let workflow_run = workflow_run["id"].to_string();
    let definition_file = cluster.dir().join("piped-workflow.json");
    std::fs::write(&definition_file, definition.to_string()).unwrap();
    let definition_file = definition_file.to_str().unwrap().to_owned();
    let (job, run) = (job.to_string(), run.to_string());
    let from = (Utc::now() - chrono::Duration::minutes(5)).to_rfc3339();
    let to = (Utc::now() + chrono::Duration::seconds(1)).to_rfc3339();

    let commands: Vec<Vec<&str>> = vec![
        vec!["--help"],
        vec!["jobs", "list"],
        vec!["jobs", "show", &job],
        vec!["jobs", "disable", &job],
        vec!["jobs", "enable", &job],
        vec![
            "jobs",
            "create",
            "--name",
            "piped",
            "--job-type",
            "cli.echo",
            "--schedule",
            "none",
        ],
        vec!["runs", "list"],
        vec!["runs", "show", &run],
        vec!["runs", "tail", &run],
        vec!["workers"],
        vec!["workflows", "list"],
        vec!["workflows", "show", &workflow],
        vec!["workflows", "update", &workflow, "-f", &definition_file],
        vec!["workflows", "disable", &workflow],
        vec!["workflows", "enable", &workflow],
        vec!["workflows", "trigger", &workflow],
        vec!["workflows", "runs"],
        vec!["workflows", "run", &workflow_run],
        vec![
            "replay",
            "--job-type",
            "cli.echo",
            "--from",
            &from,
            "--to",
            &to,
            "--dry-run",
        ],
    ];
    for args in &commands {
        for json in [false, true] {
            let mut args = args.clone();
            if json {
                args.push("--json");
            }
            let (code, signal, stderr) = cadenza_into_closed_pipe(&home, &env, &args).await;
            assert!(
                code == Some(0) || code == Some(141) || signal == Some(13),
                "`cadenza {}` into a closed pipe: exit {code:?}, signal {signal:?}\n{stderr}",
                args.join(" ")
            );
            assert!(
                !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
                "`cadenza {}` complained about the closed pipe:\n{stderr}",
                args.join(" ")
            );
        }
    }
}

/// Quartz expressions as XXL-JOB users write them: every one is accepted as a job's schedule,
/// and its preview lists local times that are what the expression says (checked here day by
/// day, without a cron parser). Expressions Quartz refuses are refused with the field named.
#[tokio::test]
async fn quartz_expressions_from_xxl_job_schedule_jobs() {
    use chrono::{Datelike, NaiveDate, Timelike, Weekday};
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = admin.api();

    let last_day = |d: NaiveDate| (28..=31).rev().find(|n| d.with_day(*n).is_some()).unwrap();
    let weekday = |d: NaiveDate| !matches!(d.weekday(), Weekday::Sat | Weekday::Sun);
    type Check = Box<dyn Fn(chrono::DateTime<chrono::FixedOffset>) -> bool>;
    let cases: Vec<(&str, Check)> = vec![
        (
            "0 0 0 L * ?",
            Box::new(move |t| t.day() == last_day(t.date_naive()) && t.hour() == 0),
        ),
        (
            "0 0 10 15W * ?",
            Box::new(move |t| {
                weekday(t.date_naive()) && (14..=16).contains(&t.day()) && t.hour() == 10
            }),
        ),
        (
            "0 0 10 ? * 6#3",
            Box::new(|t| t.weekday() == Weekday::Fri && (15..=21).contains(&t.day())),
        ),
        (
            "0 0 10 ? * 2L",
            Box::new(move |t| {
                t.weekday() == Weekday::Mon && t.day() + 7 > last_day(t.date_naive())
            }),
        ),
        (
            "0 0 8 LW * ?",
            Box::new(move |t| {
                let d = t.date_naive();
                weekday(d) && (d.day() + 1..=last_day(d)).all(|n| !weekday(d.with_day(n).unwrap()))
            }),
        ),
        (
            "0 0 0 L-2 * ?",
            Box::new(move |t| t.day() + 2 == last_day(t.date_naive())),
        ),
        (
            "0 0 2 * * ?",
            Box::new(|t| t.hour() == 2 && t.minute() == 0),
        ),
        (
            "0 0/5 * * * ?",
            Box::new(|t| t.minute() % 5 == 0 && t.second() == 0),
        ),
        (
            "0 30 9 ? * MON-FRI",
            Box::new(move |t| weekday(t.date_naive()) && t.hour() == 9),
        ),
        ("0 0 12 1/5 * ?", Box::new(|t| t.day() % 5 == 1)),
        (
            "0 15 10 ? * 6L 2026-2030",
            Box::new(|t| t.weekday() == Weekday::Fri),
        ),
        (
            "0 0 9 1 JAN,JUL ?",
            Box::new(|t| t.day() == 1 && [1, 7].contains(&t.month())),
        ),
        (
            "0 0 22-2 ? * SAT-MON",
            Box::new(|t| {
                !(3..=21).contains(&t.hour())
                    && [Weekday::Sat, Weekday::Sun, Weekday::Mon].contains(&t.weekday())
            }),
        ),
        ("0 0 0 ? * L", Box::new(|t| t.weekday() == Weekday::Sat)),
    ];
    for (expr, check) in &cases {
        let (status, job) = api
            .post_json(
                "/api/jobs",
                &serde_json::json!({
                    "name": format!("xxl {expr}"),
                    "job_type": "reports",
                    "schedule": {"kind": "cron", "expr": expr, "timezone": "Asia/Shanghai"},
                }),
            )
            .await
            .unwrap();
        assert_eq!(status, 201, "{expr}: {job}");
        let q = format!(
            "/api/schedules/preview?expr={}&timezone=Asia%2FShanghai&count=12",
            expr.replace(' ', "%20")
                .replace('#', "%23")
                .replace('/', "%2F")
        );
        let (status, v) = api.get_json(&q).await.unwrap();
        assert_eq!(status, 200, "{expr}: {v}");
        let local = v["local"].as_array().unwrap();
        assert_eq!(local.len(), 12, "{expr}: {v}");
        for t in local {
            let t = chrono::DateTime::parse_from_rfc3339(t.as_str().unwrap()).unwrap();
            assert!(check(t), "{expr} fires at {t}: {v}");
        }
        // The job's own next fire time is one of these too.
        let next: chrono::DateTime<Utc> = job["next_fire_at"].as_str().unwrap().parse().unwrap();
        // Asia/Shanghai keeps +08:00 all year.
        let shanghai = chrono::FixedOffset::east_opt(8 * 3600).unwrap();
        assert!(check(next.with_timezone(&shanghai)), "{expr}: {job}");
    }

    for (expr, named) in [
        ("0 0 0 1 * MON", "day-of-week"),
        ("0 0 0 ? * 2L,3", "day-of-week field"),
        ("0 0 0 L-31 * ?", "day-of-month field"),
        ("0 0 0 ? * MON#6", "day-of-week field"),
    ] {
        let (status, err) = api
            .post_json(
                "/api/jobs",
                &serde_json::json!({
                    "name": "refused",
                    "job_type": "reports",
                    "schedule": {"kind": "cron", "expr": expr},
                }),
            )
            .await
            .unwrap();
        assert_eq!(status, 422, "{expr}: {err}");
        assert_eq!(err["error"]["field"], "schedule.expr", "{expr}: {err}");
        let message = err["error"]["message"].as_str().unwrap();
        assert!(message.contains(named), "{expr}: {message}");
    }

    // The CLI previews the same.
    let home = cluster.dir().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let env = [
        ("CADENZA_URL", admin.base_url()),
        ("CADENZA_API_TOKEN", cluster.token()),
    ];
    let out = cadenza(
        &home,
        &env,
        &[
            "schedule",
            "preview",
            "0 0 10 ? * 6#3",
            "--timezone",
            "Asia/Shanghai",
            "--count",
            "3",
            "--json",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = out.json();
    for t in v["local"].as_array().unwrap() {
        let t = chrono::DateTime::parse_from_rfc3339(t.as_str().unwrap()).unwrap();
        assert!(
            t.weekday() == Weekday::Fri && (15..=21).contains(&t.day()),
            "{t}"
        );
    }
}

/// The next fire times of a schedule, from the API and the CLI: in the schedule's zone, with the
/// same errors as creating a job, naming the parameter.
#[tokio::test]
async fn schedule_preview_lists_the_next_fire_times_in_the_zone() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let api = admin.api();

    // Every day at 09:30 in Paris: 08:30 UTC in winter, 07:30 in summer, 09:30 local always.
    let (status, v) = api
        .get_json(
            "/api/schedules/preview?expr=0%2030%209%20*%20*%20*&timezone=Europe%2FParis&count=3",
        )
        .await
        .unwrap();
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["timezone"], "Europe/Paris");
    let local: Vec<&str> = v["local"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(local.len(), 3, "{v}");
    for (l, u) in local.iter().zip(v["fire_times"].as_array().unwrap()) {
        assert!(l.contains("T09:30:00+0"), "{l}");
        let (l, u) = (
            chrono::DateTime::parse_from_rfc3339(l).unwrap(),
            chrono::DateTime::parse_from_rfc3339(u.as_str().unwrap()).unwrap(),
        );
        assert_eq!(l, u, "the same instant");
    }
    let first = chrono::DateTime::parse_from_rfc3339(local[0]).unwrap();
    assert!(first > Utc::now() && first < Utc::now() + chrono::Duration::days(1));

    // fix_rate: every 90 s from now.
    let (_, v) = api
        .get_json("/api/schedules/preview?kind=fix_rate&every_ms=90000&count=2")
        .await
        .unwrap();
    let times: Vec<chrono::DateTime<Utc>> = v["fire_times"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(times[1] - times[0], chrono::Duration::seconds(90), "{v}");

    // Wrong input: 422 naming the parameter, with the message job creation gives.
    for (q, field) in [
        ("expr=0%2061%20*%20*%20*%20*", "expr"),
        (
            "expr=0%200%209%20*%20*%20*&timezone=Mars%2FOlympus",
            "timezone",
        ),
        ("kind=fix_rate&every_ms=0", "every_ms"),
        ("kind=sometimes", "kind"),
        ("expr=*%20*%20*%20*%20*&count=101", "count"),
    ] {
        let (status, err) = api
            .get_json(&format!("/api/schedules/preview?{q}"))
            .await
            .unwrap();
        assert_eq!(
            (status.as_u16(), &err["error"]["field"]),
            (422, &Value::from(field)),
            "{q}: {err}"
        );
    }

    // The CLI shows the same as a table.
    let home = cluster.dir().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let env = [
        ("CADENZA_URL", admin.base_url()),
        ("CADENZA_API_TOKEN", cluster.token()),
    ];
    let out = cadenza(
        &home,
        &env,
        &[
            "schedule",
            "preview",
            "0 30 9 * * *",
            "--timezone",
            "Europe/Paris",
            "--count",
            "2",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout.matches("T09:30:00+0").count(),
        2,
        "{}",
        out.stdout
    );
    let out = cadenza(&home, &env, &["schedule", "preview", "0 61 * * * *"]).await;
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("expr"), "{}", out.stderr);
}
