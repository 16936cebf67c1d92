//! The committed OpenAPI document (`docs/openapi.json`) must be the one the admin serves. To
//! regenerate it after a deliberate change of the API:
//! `CADENZA_BLESS=1 cargo test -p cadenza-admin --test openapi`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;

fn committed_path() -> PathBuf {
    manifest_dir().join("../docs/openapi.json")
}

#[test]
fn committed_openapi_document_matches_the_api() {
    let want = cadenza_admin::api::openapi_json();
    let path = committed_path();
    if std::env::var_os("CADENZA_BLESS").is_some() {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/openapi.json is out of date. If the API change is intended, run \
         CADENZA_BLESS=1 cargo test -p cadenza-admin --test openapi and commit docs/openapi.json"
    );
}

/// Every operation of the document is a route with an authorization rule, and every route is in
/// the document; operations that need credentials say so.
#[test]
fn the_document_and_the_route_table_describe_the_same_operations() {
    let doc: Value = serde_json::from_str(&cadenza_admin::api::openapi_json()).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut in_doc = BTreeSet::new();
    let mut operation_ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if path.starts_with("/api/") {
                in_doc.insert((method.to_uppercase(), path.clone()));
            } else {
                assert!(
                    ["/healthz", "/readyz", "/metrics"].contains(&path.as_str()),
                    "{path}"
                );
                assert!(op["security"].is_null(), "{path} needs no credentials");
            }
            let id = op["operationId"].as_str().unwrap().to_owned();
            assert!(operation_ids.insert(id.clone()), "operationId {id} twice");
            let responses = op["responses"].as_object().unwrap();
            assert!(
                responses.keys().any(|s| s.starts_with('2')),
                "{method} {path} documents no success answer"
            );
            for (status, r) in responses {
                if !status.starts_with('2') && path.starts_with("/api/") {
                    // The error body, or one that holds it and says more (the import's report).
                    let schema = r["content"]["application/json"]["schema"]["$ref"]
                        .as_str()
                        .unwrap_or_default();
                    let name = schema.trim_start_matches("#/components/schemas/");
                    let body = &doc["components"]["schemas"][name];
                    assert!(
                        schema == "#/components/schemas/ErrorBody"
                            || (body["properties"]["error"]["$ref"]
                                == "#/components/schemas/ErrorDetail"
                                && body["required"]
                                    .as_array()
                                    .is_some_and(|r| r.contains(&Value::from("error")))),
                        "{method} {path} answers {status} with the error body, not {schema}"
                    );
                }
            }
        }
    }
    let rules = cadenza_admin::api::rules();
    let in_table: BTreeSet<(String, String)> = rules
        .iter()
        .map(|(m, p, _)| (m.to_string(), p.clone()))
        .collect();
    assert_eq!(in_doc, in_table);
    for (method, path, rule) in rules {
        let op = &doc["paths"][&path][method.as_str().to_lowercase()];
        let public = rule == cadenza_admin::auth::rules::Rule::Public;
        assert_eq!(
            op["security"].is_null(),
            public,
            "{method} {path}: security requirements {}",
            op["security"]
        );
        if !public {
            assert!(op["responses"]["401"].is_object() && op["responses"]["403"].is_object());
        }
    }
    let codes = doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .unwrap();
    assert!(codes.contains(&Value::from("invalid_field")) && codes.len() >= 15);
}

/// This crate's directory: as the test runner says when it runs the test, else where it was
/// compiled (a test binary reused from a build in another checkout would read that checkout).
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}
