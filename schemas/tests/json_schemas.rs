//! The committed JSON Schema files must match the types. To regenerate them after a deliberate
//! change: `CADENZA_BLESS=1 cargo test -p cadenza-schemas --test json_schemas`.

use std::path::PathBuf;

#[test]
fn committed_json_schemas_match_the_types() {
    let dir = manifest_dir().join("json");
    let bless = std::env::var_os("CADENZA_BLESS").is_some();
    let mut drifted = Vec::new();
    for (name, schema) in cadenza_schemas::json_schema::all() {
        let path = dir.join(name);
        let want = cadenza_schemas::json_schema::render(&schema);
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &want).unwrap();
            continue;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        if have != want {
            drifted.push(name);
        }
    }
    assert!(
        drifted.is_empty(),
        "JSON Schema files out of date: {drifted:?}. If the change is intended, run \
         CADENZA_BLESS=1 cargo test -p cadenza-schemas --test json_schemas and commit schemas/json/"
    );
}

/// This crate's directory: as the test runner says when it runs the test, else where it was
/// compiled (a test binary reused from a build in another checkout would read that checkout).
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}
