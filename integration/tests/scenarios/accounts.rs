//! Users, sign-in, sessions with CSRF, personal API tokens and roles, against a real admin.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] functions

use std::process::Stdio;
use std::time::Duration;

use cadenza_integration::{cadenza_bin, ApiClient, Cluster, StatusCode};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

/// `cadenza-admin users create …` with `password` on stdin: (exit code, stdout, stderr).
pub(crate) async fn create_user(
    cluster: &Cluster,
    args: &[&str],
    password: &str,
) -> (i32, String, String) {
    let mut cmd = tokio::process::Command::new(cadenza_bin("cadenza-admin").unwrap());
    cmd.args(["users", "create"])
        .args(args)
        .env("CADENZA_DATABASE_URL", cluster.database_url())
        .env_remove("CADENZA_BOOTSTRAP_ADMIN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(format!("{password}\n").as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A client that keeps cookies, as a browser does.
pub(crate) fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .cookie_store(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

pub(crate) async fn send(req: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let resp = req.send().await.unwrap();
    let status = resp.status();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test]
async fn users_sign_in_with_sessions_and_tokens_and_roles_limit_them() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster
        .spawn_admin(&[("CADENZA_BOOTSTRAP_ADMIN", "root:first admin pw")])
        .await
        .unwrap();
    let base = admin.base_url().to_owned();
    let url = |p: &str| format!("{base}{p}");

    // Users from the command line, the password on stdin; bad input names the field.
    let (code, out, err) = create_user(
        &cluster,
        &[
            "--name",
            "vera",
            "--role",
            "viewer",
            "--job-types",
            "billing.*",
        ],
        "viewer password",
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("created user vera (viewer)"), "{out}");
    let (code, _, err) = create_user(
        &cluster,
        &[
            "--name",
            "olga",
            "--role",
            "operator",
            "--job-types",
            "billing.*",
        ],
        "short",
    )
    .await;
    assert_ne!(code, 0);
    assert!(
        err.contains("password") && err.contains("at least 10"),
        "{err}"
    );
    let (code, _, err) = create_user(
        &cluster,
        &["--name", "vera", "--role", "viewer"],
        "another long one",
    )
    .await;
    assert_ne!(code, 0);
    assert!(err.contains("exists already"), "{err}");
    let (code, _, err) = create_user(
        &cluster,
        &["--name", "x", "--role", "boss"],
        "long enough pw",
    )
    .await;
    assert_ne!(code, 0);
    assert!(
        err.contains("--role") && err.contains("admin, operator or viewer"),
        "{err}"
    );

    // The bootstrap admin signs in: an HttpOnly, SameSite=Strict cookie and a CSRF token.
    let root = browser();
    let resp = root
        .post(url("/api/session"))
        .json(&json!({"name": "root", "password": "first admin pw"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let cookie = resp
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    let session: Value = resp.json().await.unwrap();
    // Behind a proxy that terminated TLS, the cookie is Secure too.
    let resp = browser()
        .post(url("/api/session"))
        .header("x-forwarded-proto", "https")
        .json(&json!({"name": "root", "password": "first admin pw"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let secure = resp.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        secure.contains("; Secure") && secure.contains("HttpOnly"),
        "{secure}"
    );
    let csrf = session["csrf_token"].as_str().unwrap().to_owned();
    assert_eq!(session["user"]["role"], "admin");
    let (status, me) = send(root.get(url("/api/session"))).await;
    assert_eq!(
        (status, &me["actor"], &me["via"]),
        (StatusCode::OK, &json!("root"), &json!("session"))
    );

    // A write with the cookie but without the CSRF token is refused and writes nothing.
    let job = json!({"name": "j", "job_type": "billing.x", "schedule": {"kind": "none"}});
    let (status, err) = send(root.post(url("/api/jobs")).json(&job)).await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (StatusCode::FORBIDDEN, &json!("csrf_required")),
        "{err}"
    );
    let (status, created) = send(
        root.post(url("/api/jobs"))
            .header("X-CSRF-Token", &csrf)
            .json(&job),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");

    // Wrong password and unknown user answer alike.
    let anon = browser();
    let (s1, e1) = send(
        anon.post(url("/api/session"))
            .json(&json!({"name": "root", "password": "wrong password"})),
    )
    .await;
    let (s2, e2) = send(
        anon.post(url("/api/session"))
            .json(&json!({"name": "nobody", "password": "wrong password"})),
    )
    .await;
    assert_eq!(
        (s1, s2),
        (StatusCode::UNAUTHORIZED, StatusCode::UNAUTHORIZED)
    );
    assert_eq!(e1, e2, "the answer never says whether the user exists");
    assert!(
        !e1.to_string().contains("wrong password"),
        "no password echoed: {e1}"
    );

    // A viewer signs in, reads, and may not write.
    let vera = browser();
    let (status, v) = send(
        vera.post(url("/api/session"))
            .json(&json!({"name": "vera", "password": "viewer password"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let vcsrf = v["csrf_token"].as_str().unwrap().to_owned();
    let (status, _) = send(vera.get(url("/api/jobs"))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, err) = send(
        vera.post(url("/api/jobs"))
            .header("X-CSRF-Token", &vcsrf)
            .json(&job),
    )
    .await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (StatusCode::FORBIDDEN, &json!("forbidden")),
        "{err}"
    );
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("operator"),
        "{err}"
    );

    // A personal token: shown once, acts as its owner, listed without its secret, revoked.
    let (status, t) = send(
        vera.post(url("/api/tokens"))
            .header("X-CSRF-Token", &vcsrf)
            .json(&json!({"name": "ci", "expires_in_days": 30})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{t}");
    let token = t["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("cdz_"));
    let as_token = ApiClient::new(base.clone(), Some(token.clone())).unwrap();
    let (status, me) = as_token.get_json("/api/session").await.unwrap();
    assert_eq!(
        (status, &me["actor"], &me["role"], &me["via"]),
        (
            StatusCode::OK,
            &json!("vera"),
            &json!("viewer"),
            &json!("api_token")
        )
    );
    let (status, err) = as_token.post_json("/api/jobs", &job).await.unwrap();
    assert_eq!(
        (status, &err["error"]["code"]),
        (StatusCode::FORBIDDEN, &json!("forbidden"))
    );
    // A token cannot make a token (one that would outlive it, or survive its revocation).
    let (status, err) = as_token
        .post_json("/api/tokens", &json!({"name": "forever"}))
        .await
        .unwrap();
    assert_eq!(
        (status, &err["error"]["code"]),
        (StatusCode::FORBIDDEN, &json!("forbidden")),
        "{err}"
    );
    let (_, list) = send(vera.get(url("/api/tokens"))).await;
    assert_eq!(list["tokens"].as_array().unwrap().len(), 1, "{list}");
    assert!(
        !list.to_string().contains(&token),
        "the secret is shown once only"
    );
    let id = t["id"].as_i64().unwrap();
    // Another user's token cannot be revoked by a viewer; the admin can.
    let (status, _) = send(
        root.delete(url(&format!("/api/tokens/{id}")))
            .header("X-CSRF-Token", &csrf),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, err) = as_token.get_json("/api/session").await.unwrap();
    assert_eq!(
        (status, &err["error"]["code"]),
        (StatusCode::UNAUTHORIZED, &json!("unauthorized"))
    );

    // An expired token is refused.
    let (_, t2) = send(
        vera.post(url("/api/tokens"))
            .header("X-CSRF-Token", &vcsrf)
            .json(&json!({"name": "short-lived", "expires_in_days": 1})),
    )
    .await;
    let pool = cluster.pool().await.unwrap();
    sqlx::query("UPDATE api_tokens SET expires_at = now() - interval '1 second' WHERE id = $1")
        .bind(t2["id"].as_i64().unwrap())
        .execute(&pool)
        .await
        .unwrap();
    let expired = ApiClient::new(base.clone(), t2["token"].as_str().map(str::to_owned)).unwrap();
    let (status, _) = expired.get_json("/api/jobs").await.unwrap();
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Signing out ends the session.
    let (status, _) = send(vera.delete(url("/api/session"))).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = send(vera.get(url("/api/jobs"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Guessing is slowed: after five failures for a name, even the right password waits.
    for _ in 0..5 {
        let (s, _) = send(
            anon.post(url("/api/session"))
                .json(&json!({"name": "vera", "password": "not it at all"})),
        )
        .await;
        assert_ne!(s, StatusCode::OK);
    }
    let (status, err) = send(
        anon.post(url("/api/session"))
            .json(&json!({"name": "vera", "password": "viewer password"})),
    )
    .await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (StatusCode::TOO_MANY_REQUESTS, &json!("too_many_attempts")),
        "{err}"
    );
    // No password appears in the admin's log.
    let log = admin.log();
    for pw in ["first admin pw", "viewer password", "not it at all"] {
        assert!(!log.contains(pw), "a password in the log");
    }
}

/// Signs `name` in and creates a personal token for them: a client using it.
pub(crate) async fn token_client(base: &str, name: &str, password: &str) -> ApiClient {
    let b = browser();
    let (status, s) = send(
        b.post(format!("{base}/api/session"))
            .json(&json!({"name": name, "password": password})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{s}");
    let csrf = s["csrf_token"].as_str().unwrap().to_owned();
    let (status, t) = send(
        b.post(format!("{base}/api/tokens"))
            .header("X-CSRF-Token", csrf)
            .json(&json!({"name": "test"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{t}");
    ApiClient::new(base.to_owned(), t["token"].as_str().map(str::to_owned)).unwrap()
}

#[tokio::test]
async fn operators_act_only_within_their_patterns_and_every_write_is_audited() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let base = admin.base_url().to_owned();
    let root = admin.api();
    for (name, role, pw) in [
        ("olga", "operator", "operator password"),
        ("vera", "viewer", "viewer password"),
    ] {
        let (code, out, err) = create_user(
            &cluster,
            &["--name", name, "--role", role, "--job-types", "billing.*"],
            pw,
        )
        .await;
        assert_eq!(code, 0, "{out}{err}");
    }
    let olga = token_client(&base, "olga", "operator password").await;
    let vera = token_client(&base, "vera", "viewer password").await;
    let job = |name: &str, job_type: &str| json!({"name": name, "job_type": job_type, "schedule": {"kind": "none"}, "params": "p1"});
    let billing = root
        .create_job(&job("invoice", "billing.invoice"))
        .await
        .unwrap();
    let ops = root
        .create_job(&job("cleanup", "ops.cleanup"))
        .await
        .unwrap();

    // Reads are scoped: the other job is neither listed nor readable.
    let (_, list) = olga.get_json("/api/jobs").await.unwrap();
    let ids: Vec<i64> = list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [billing], "{list}");
    let (status, err) = vera.get_json(&format!("/api/jobs/{ops}")).await.unwrap();
    assert_eq!(
        (status, &err["error"]["code"]),
        (StatusCode::FORBIDDEN, &json!("forbidden")),
        "{err}"
    );
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("billing.*"),
        "{err}"
    );

    // Writes inside the patterns pass; outside (including moving a job out) are 403.
    let (status, _) = olga
        .patch_json(&format!("/api/jobs/{billing}"), &json!({"params": "p2"}))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    let (status, _) = olga
        .post_json("/api/jobs", &job("new", "billing.refund"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = olga
        .post_empty(&format!("/api/jobs/{billing}/trigger"))
        .await
        .unwrap();
    assert_eq!(status, StatusCode::ACCEPTED);
    for (what, (status, body)) in [
        ("patch outside", olga.patch_json(&format!("/api/jobs/{ops}"), &json!({"params": "x"})).await.unwrap()),
        ("move out", olga.patch_json(&format!("/api/jobs/{billing}"), &json!({"job_type": "ops.moved"})).await.unwrap()),
        ("create outside", olga.post_json("/api/jobs", &job("x", "ops.x")).await.unwrap()),
        ("trigger outside", olga.post_empty(&format!("/api/jobs/{ops}/trigger")).await.unwrap()),
        ("delete outside", olga.delete(&format!("/api/jobs/{ops}")).await.unwrap()),
        ("replay outside", olga.post_json("/api/replay", &json!({"job_type": "ops.cleanup", "partitions": [{"partition": 0, "from_offset": 0, "to_offset": 1}]})).await.unwrap()),
        ("viewer write", vera.post_empty(&format!("/api/jobs/{billing}/disable")).await.unwrap()),
    ] {
        assert_eq!((status, &body["error"]["code"]), (StatusCode::FORBIDDEN, &json!("forbidden")), "{what}: {body}");
    }
    // Nothing changed outside.
    let (_, cleanup) = root.get_json(&format!("/api/jobs/{ops}")).await.unwrap();
    assert_eq!(
        (&cleanup["params"], &cleanup["job_type"]),
        (&json!("p1"), &json!("ops.cleanup"))
    );
    let (_, invoice) = root
        .get_json(&format!("/api/jobs/{billing}"))
        .await
        .unwrap();
    assert_eq!(
        (
            &invoice["params"],
            &invoice["job_type"],
            &invoice["enabled"]
        ),
        (&json!("p2"), &json!("billing.invoice"), &json!(true))
    );

    // A change that fails leaves no audit row.
    let (_, before) = root.get_json("/api/audit?limit=1000").await.unwrap();
    let count = before["audit"].as_array().unwrap().len();
    let (status, _) = olga
        .patch_json(
            &format!("/api/jobs/{billing}"),
            &json!({"schedule": {"kind": "cron", "expr": "nope"}}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (_, after) = root.get_json("/api/audit?limit=1000").await.unwrap();
    assert_eq!(after["audit"].as_array().unwrap().len(), count, "{after}");

    // The audit: who did what, with the job before and after; refused attempts too.
    let rows = after["audit"].as_array().unwrap().clone();
    let find = |action: &str, actor: &str, outcome: &str| {
        rows.iter()
            .filter(|r| r["action"] == action && r["actor"] == actor && r["outcome"] == outcome)
            .cloned()
            .collect::<Vec<Value>>()
    };
    assert_eq!(find("job.create", "service", "done").len(), 2, "{rows:#?}");
    assert_eq!(find("job.create", "olga", "done").len(), 1);
    let update = find("job.update", "olga", "done");
    assert_eq!(update.len(), 1, "{rows:#?}");
    assert_eq!(
        (
            &update[0]["before"]["params"],
            &update[0]["after"]["params"]
        ),
        (&json!("p1"), &json!("p2"))
    );
    assert_eq!(update[0]["job_id"], billing);
    assert_eq!(update[0]["source"], "127.0.0.1");
    assert_eq!(find("job.trigger", "olga", "done").len(), 1);
    let refused: Vec<&Value> = rows.iter().filter(|r| r["outcome"] == "refused").collect();
    assert_eq!(
        refused.iter().filter(|r| r["actor"] == "olga").count(),
        6,
        "{refused:#?}"
    );
    assert_eq!(
        refused.iter().filter(|r| r["actor"] == "vera").count(),
        1,
        "{refused:#?}"
    );
    // A viewer sees the rows about the job types they may see, and an actor filter works.
    let (_, theirs) = vera.get_json("/api/audit?actor=service").await.unwrap();
    let seen: Vec<&Value> = theirs["audit"].as_array().unwrap().iter().collect();
    assert!(
        seen.iter()
            .all(|r| r["job_type"].as_str().unwrap_or("").starts_with("billing.")),
        "{theirs}"
    );
    assert_eq!(seen.len(), 1, "{theirs}");
}

#[tokio::test]
async fn admins_manage_users_and_nobody_else_may() {
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let base = admin.base_url().to_owned();
    let root = admin.api();
    let new = json!({"name": "otto", "role": "operator", "job_types": ["ops.*"], "password": "otto's password"});
    let (status, otto) = root.post_json("/api/users", &new).await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{otto}");
    assert!(
        otto.get("password").is_none() && otto.get("password_hash").is_none(),
        "{otto}"
    );
    let (status, err) = root.post_json("/api/users", &new).await.unwrap();
    assert_eq!(
        (status, &err["error"]["code"]),
        (StatusCode::CONFLICT, &json!("user_exists")),
        "{err}"
    );
    for (patch, field) in [
        (
            json!({"name": "p", "role": "viewer", "password": "short"}),
            "password",
        ),
        (
            json!({"name": "has space", "role": "viewer", "password": "long enough pw"}),
            "name",
        ),
        (
            json!({"name": "q", "role": "viewer", "job_types": ["bad pattern"], "password": "long enough pw"}),
            "job_types[0]",
        ),
        (
            json!({"name": "r", "role": "root", "password": "long enough pw"}),
            "role",
        ),
    ] {
        let (status, err) = root.post_json("/api/users", &patch).await.unwrap();
        assert_eq!(
            (status, &err["error"]["field"]),
            (StatusCode::UNPROCESSABLE_ENTITY, &json!(field)),
            "{patch} → {err}"
        );
    }

    // An operator may not manage users.
    let as_otto = token_client(&base, "otto", "otto's password").await;
    let (status, err) = as_otto.get_json("/api/users").await.unwrap();
    assert_eq!(
        (status, &err["error"]["code"]),
        (StatusCode::FORBIDDEN, &json!("forbidden")),
        "{err}"
    );
    assert!(
        err["error"]["message"].as_str().unwrap().contains("admin"),
        "{err}"
    );
    let (status, _) = as_otto
        .post_json(
            "/api/users",
            &json!({"name": "sneaky", "role": "admin", "password": "long enough pw"}),
        )
        .await
        .unwrap();
    assert_eq!(status, StatusCode::FORBIDDEN);

    // A changed role takes effect on the user's token at once; a new password ends sessions.
    let id = otto["id"].as_i64().unwrap();
    let (status, changed) = root
        .patch_json(
            &format!("/api/users/{id}"),
            &json!({"role": "viewer", "password": "a new password"}),
        )
        .await
        .unwrap();
    assert_eq!(
        (status, &changed["role"]),
        (StatusCode::OK, &json!("viewer")),
        "{changed}"
    );
    let (_, me) = as_otto.get_json("/api/session").await.unwrap();
    assert_eq!(me["role"], "viewer");
    let (status, _) = send(
        browser()
            .post(format!("{base}/api/session"))
            .json(&json!({"name": "otto", "password": "otto's password"})),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // Deleting the user ends their tokens; every change is in the audit.
    let (status, _) = root.delete(&format!("/api/users/{id}")).await.unwrap();
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = as_otto.get_json("/api/session").await.unwrap();
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (_, audit) = root.get_json("/api/audit").await.unwrap();
    let actions: Vec<&str> = audit["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["outcome"] == "done")
        .map(|r| r["action"].as_str().unwrap())
        .filter(|a| a.starts_with("user."))
        .collect();
    assert_eq!(
        actions,
        ["user.delete", "user.update", "user.create"],
        "{audit}"
    );
    let rows = audit["audit"].as_array().unwrap();
    let has = |action: &str, outcome: &str| {
        rows.iter()
            .any(|r| r["action"] == action && r["actor"] == "otto" && r["outcome"] == outcome)
    };
    assert!(
        has("login", "done") && has("token.create", "done"),
        "{audit}"
    );
    assert!(
        has("login", "refused"),
        "the sign-in with the old password: {audit}"
    );
    assert!(
        !audit.to_string().contains("password\":"),
        "no password in the audit: {audit}"
    );
    let refused = audit["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["outcome"] == "refused" && r["actor"] == "otto" && r["action"] != "login")
        .count();
    assert_eq!(refused, 1, "{audit}");
}

/// The route table: every route of the API, called as nobody, a viewer, an operator with no
/// matching pattern and an admin, answers 401/403 exactly as its rule says. A route added to the
/// API is in this table (the router is built from it); a route the layer finds no rule for is
/// refused to everyone, which fails here too.
#[tokio::test]
async fn every_route_lets_in_exactly_the_roles_its_rule_names() {
    use cadenza_admin::auth::rules::Rule;
    let cluster = Cluster::start().await.unwrap();
    let admin = cluster.spawn_admin(&[]).await.unwrap();
    let base = admin.base_url().to_owned();
    for (name, role) in [("vic", "viewer"), ("opal", "operator")] {
        let (code, out, err) = create_user(
            &cluster,
            &["--name", name, "--role", role, "--job-types", "none.*"],
            "a long password",
        )
        .await;
        assert_eq!(code, 0, "{out}{err}");
    }
    let viewer = token_client(&base, "vic", "a long password").await;
    let operator = token_client(&base, "opal", "a long password").await;
    let nobody = ApiClient::new(base.clone(), None).unwrap();
    let root = admin.api();
    // Every operation of the document the admin serves, with the rule the route table gives it.
    let (status, doc) = nobody.get_json("/api/openapi.json").await.unwrap();
    assert_eq!(status, StatusCode::OK);
    let table: std::collections::HashMap<(String, String), Rule> = cadenza_admin::api::rules()
        .into_iter()
        .map(|(m, p, r)| ((m.to_string(), p), r))
        .collect();
    let mut rules = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/api/") {
            continue; // the probes, /healthz and /readyz: open to anyone
        }
        for method in item.as_object().unwrap().keys() {
            let method = method.to_uppercase();
            let rule = *table
                .get(&(method.clone(), path.clone()))
                .unwrap_or_else(|| panic!("{method} {path} is in the document but has no rule"));
            rules.push((
                cadenza_integration::Method::from_bytes(method.as_bytes()).unwrap(),
                path.clone(),
                rule,
            ));
        }
    }
    assert_eq!(rules.len(), table.len(), "every route is in the document");
    assert!(rules.len() >= 20, "{rules:?}");
    for (method, path, rule) in &rules {
        // An id nothing has: no call changes the users and tokens the next calls use.
        let path = path.replace("{id}", "999999");
        let body = (!matches!(method.as_str(), "GET" | "HEAD" | "DELETE")).then(|| json!({}));
        for (who, client) in [
            ("nobody", &nobody),
            ("viewer", &viewer),
            ("operator", &operator),
            ("admin", &root),
        ] {
            let (status, answer) = client
                .request(method.clone(), &path, body.as_ref())
                .await
                .unwrap();
            let expected = match (rule, who) {
                (Rule::Public, _) => None,
                (_, "nobody") => Some(StatusCode::UNAUTHORIZED),
                (Rule::Write, "viewer") | (Rule::Admin, "viewer" | "operator") => {
                    Some(StatusCode::FORBIDDEN)
                }
                _ => None,
            };
            match expected {
                Some(want) => assert_eq!(status, want, "{method} {path} as {who}: {answer}"),
                None => assert!(
                    status != StatusCode::UNAUTHORIZED
                        && !(status == StatusCode::FORBIDDEN
                            && answer.to_string().contains("role")),
                    "{method} {path} as {who} ({rule:?}) was refused: {status} {answer}"
                ),
            }
            assert!(
                !answer.to_string().contains("no authorization rule"),
                "{method} {path}: {answer}"
            );
            assert!(
                status.as_u16() < 500,
                "{method} {path} as {who}: {status} {answer}"
            );
        }
    }

    // HEAD needs what GET needs; a method a path does not take is 405 naming those it takes,
    // for everyone, and runs nothing.
    let (status, _) = nobody
        .request(cadenza_integration::Method::HEAD, "/api/jobs", None)
        .await
        .unwrap();
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let resp = reqwest::Client::new()
        .put(format!("{base}/api/jobs"))
        .bearer_auth(cluster.token())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(resp.headers()["allow"], "GET, POST");
    for client in [&nobody, &root] {
        let (status, answer) = client
            .request(
                cadenza_integration::Method::PUT,
                "/api/jobs/1",
                Some(&json!({})),
            )
            .await
            .unwrap();
        assert_eq!(
            (status, &answer["error"]["code"]),
            (StatusCode::METHOD_NOT_ALLOWED, &json!("method_not_allowed")),
            "{answer}"
        );
    }
}
