//! Export files of `xxl_job_info` and `xxl_job_group` read into rows (the CLI reads them and
//! sends the rows to the API).
//!
//! - **Tab-separated** (a header line with a tab): `mysql --batch` output. Values are not quoted;
//!   `\n`, `\t`, `\0`, `\\` (and `\r`, `\b`, `\Z` of `SELECT … INTO OUTFILE`) are unescaped, and
//!   `NULL` or `\N` is null.
//! - **Comma-separated** (or `;` when the header has no comma): RFC 4180 CSV, quoted values may
//!   hold the delimiter, quotes (`""`) and line breaks; `NULL` or `\N` is null, an empty value is
//!   empty text.
//! - **JSON**: an array of row objects (MySQL Workbench, `mysqlsh --result-format=json/array`); an
//!   object `{"xxl_job_info": [...], "xxl_job_group": [...]}`; `mysqlsh --json` output
//!   (`{"rows": [...]}`); phpMyAdmin's JSON export (tables named `xxl_job_info` and
//!   `xxl_job_group`); or one row object per line (`json/raw`, NDJSON). Values are text, numbers
//!   or null (`true`/`false` are read as 1/0).
//!
//! A row that cannot be read (a line with another number of fields than the header, an element
//! that is not an object) is a [`Problem`] naming its line or element; the other rows are read.

use serde_json::Value;

use cadenza_schemas::xxl_export::{Cell, Row};

/// Which table a file (or an unnamed array of rows) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// `xxl_job_info`.
    Jobs,
    /// `xxl_job_group`.
    Groups,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Jobs => "xxl_job_info",
            Table::Groups => "xxl_job_group",
        }
    }
}

/// A row and where it is in its file (`line 7`, `element 3`), for messages.
#[derive(Debug, Clone)]
pub struct Located {
    pub at: String,
    pub row: Row,
}

/// A row that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub at: String,
    pub message: String,
}

/// What a file holds.
#[derive(Debug, Default)]
pub struct Export {
    /// `xxl_job_info` rows, when the file has that table.
    pub jobs: Option<Vec<Located>>,
    /// `xxl_job_group` rows, when the file has that table.
    pub groups: Option<Vec<Located>>,
    /// The rows that cannot be read.
    pub problems: Vec<Problem>,
}

/// Reads an export; `table` is what a file without table names holds. The error is why the
/// file as a whole cannot be read.
pub fn read(text: &str, table: Table) -> Result<Export, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let first = text.trim_start().chars().next();
    match first {
        None => Err("the file is empty".to_owned()),
        Some('[' | '{') => read_json(text, table),
        Some(_) => read_delimited(text, table),
    }
}

/// `NULL` and `\N` are null (what mysql and `SELECT … INTO OUTFILE` write for it).
fn cell_of(text: String) -> Cell {
    if text == "NULL" || text == r"\N" {
        Cell::Null
    } else {
        Cell::Text(text)
    }
}

/// Undoes mysql's batch-mode escaping.
fn unescape_mysql(s: &str) -> String {
    if !s.contains('\\') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some('b') => out.push('\u{8}'),
            Some('Z') => out.push('\u{1a}'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

fn read_delimited(text: &str, table: Table) -> Result<Export, String> {
    let header = text.lines().next().unwrap_or_default();
    let (delimiter, mysql) = if header.contains('\t') {
        (b'\t', true)
    } else if header.contains(',') {
        (b',', false)
    } else if header.contains(';') {
        (b';', false)
    } else {
        (b',', false)
    };
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .quoting(!mysql)
        .flexible(true)
        .has_headers(true)
        .from_reader(text.as_bytes());
    let headers: Vec<String> = reader
        .headers()
        .map_err(|e| format!("cannot read the header line: {e}"))?
        .iter()
        .map(|h| h.trim().trim_matches('`').to_owned())
        .collect();
    if !headers.iter().any(|h| h.eq_ignore_ascii_case("id")) {
        return Err(format!(
            "the first line is not a header of {} column names (it has no column id); export \
             with `mysql --batch -e 'select * from {}'`, which writes one",
            table.name(),
            table.name()
        ));
    }
    // The line a record starts on, counting line breaks inside quoted values too.
    let line_at = |p: Option<&csv::Position>| match p {
        Some(p) => {
            // A record's position may be on the line break that ends the one before (CRLF).
            let bytes = text.as_bytes();
            let mut end = usize::try_from(p.byte())
                .unwrap_or(usize::MAX)
                .min(bytes.len());
            while end < bytes.len() && matches!(bytes[end], b'\r' | b'\n') {
                end += 1;
            }
            let line = bytes[..end].iter().filter(|b| **b == b'\n').count() + 1;
            format!("line {line}")
        }
        None => "a line".to_owned(),
    };
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    for record in reader.records() {
        let record = match record {
            Ok(r) => r,
            Err(e) => {
                let at = line_at(e.position());
                let message = match e.kind() {
                    csv::ErrorKind::Utf8 { .. } => "is not UTF-8 text".to_owned(),
                    _ => e.to_string(),
                };
                problems.push(Problem { at, message });
                continue;
            }
        };
        let at = line_at(record.position());
        if record.len() == 1 && record.get(0).is_some_and(|f| f.trim().is_empty()) {
            continue;
        }
        if record.len() != headers.len() {
            let hint = if mysql {
                "a tab or line break inside a value? export with mysql --batch (not --raw), \
                 which escapes them"
            } else {
                "a value holding the delimiter or a line break must be quoted"
            };
            problems.push(Problem {
                at,
                message: format!(
                    "malformed row: it has {} fields and the header {} ({hint})",
                    record.len(),
                    headers.len()
                ),
            });
            continue;
        }
        let row: Row = headers
            .iter()
            .zip(record.iter())
            .map(|(h, v)| {
                let v = if mysql {
                    if v == r"\N" || v == "NULL" {
                        return (h.clone(), Cell::Null);
                    }
                    unescape_mysql(v)
                } else {
                    v.to_owned()
                };
                (h.clone(), cell_of(v))
            })
            .collect();
        rows.push(Located { at, row });
    }
    let mut export = Export {
        problems,
        ..Export::default()
    };
    match table {
        Table::Jobs => export.jobs = Some(rows),
        Table::Groups => export.groups = Some(rows),
    }
    Ok(export)
}

/// A JSON value of a row as a cell; `None` for an object or array.
fn json_cell(v: &Value) -> Option<Cell> {
    Some(match v {
        Value::Null => Cell::Null,
        Value::Bool(b) => Cell::Number(i64::from(*b).into()),
        Value::Number(n) => Cell::Number(n.clone()),
        Value::String(s) => Cell::Text(s.clone()),
        Value::Array(_) | Value::Object(_) => return None,
    })
}

/// The rows of a JSON array; `prefix` names the array in messages.
fn json_rows(items: &[Value], prefix: &str, problems: &mut Vec<Problem>) -> Vec<Located> {
    let mut rows = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("{prefix}{}", i + 1);
        let Value::Object(map) = item else {
            problems.push(Problem {
                at,
                message: "malformed row: not an object of column names and values".to_owned(),
            });
            continue;
        };
        let mut row = Row::new();
        let mut bad = None;
        for (k, v) in map {
            match json_cell(v) {
                Some(c) => {
                    row.insert(k.clone(), c);
                }
                None => bad = Some(k.clone()),
            }
        }
        match bad {
            Some(column) => problems.push(Problem {
                at,
                message: format!(
                    "malformed row: column {column} holds an object or array; expected text, a \
                     number or null"
                ),
            }),
            None => rows.push(Located { at, row }),
        }
    }
    rows
}

fn read_json(text: &str, table: Table) -> Result<Export, String> {
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(whole) => {
            // One row object per line (mysqlsh --result-format=json/raw, NDJSON)?
            let lines: Result<Vec<Value>, _> = text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(serde_json::from_str::<Value>)
                .collect();
            match lines {
                Ok(items) if items.len() > 1 && items.iter().all(Value::is_object) => {
                    Value::Array(items)
                }
                _ => return Err(format!("not valid JSON: {whole}")),
            }
        }
    };
    let mut export = Export::default();
    let mut problems = Vec::new();
    let mut put = |t: Table, rows: Vec<Located>| match t {
        Table::Jobs => export.jobs = Some(rows),
        Table::Groups => export.groups = Some(rows),
    };
    match &value {
        Value::Array(items) => {
            // phpMyAdmin: [{"type":"header"…}, {"type":"table","name":"xxl_job_info","data":[…]}]
            let tables: Vec<(&str, &Vec<Value>)> = items
                .iter()
                .filter(|i| i["type"] == "table")
                .filter_map(|i| Some((i["name"].as_str()?, i["data"].as_array()?)))
                .collect();
            if tables.is_empty() {
                put(table, json_rows(items, "element ", &mut problems));
            } else {
                for t in [Table::Jobs, Table::Groups] {
                    if let Some((name, data)) = tables.iter().find(|(n, _)| *n == t.name()) {
                        put(
                            t,
                            json_rows(data, &format!("{name} element "), &mut problems),
                        );
                    }
                }
            }
        }
        Value::Object(map) => {
            let mut found = false;
            for t in [Table::Jobs, Table::Groups] {
                if let Some(v) = map.get(t.name()) {
                    let items = v
                        .as_array()
                        .or_else(|| v["rows"].as_array())
                        .ok_or_else(|| format!("{} is not an array of rows", t.name()))?;
                    put(
                        t,
                        json_rows(items, &format!("{} element ", t.name()), &mut problems),
                    );
                    found = true;
                }
            }
            if !found {
                let items = map.get("rows").and_then(Value::as_array).ok_or_else(|| {
                    "a JSON object needs xxl_job_info (and xxl_job_group) arrays of rows, or \
                     rows (mysqlsh --json)"
                        .to_owned()
                })?;
                put(table, json_rows(items, "element ", &mut problems));
            }
        }
        _ => return Err("not an array or object of rows".to_owned()),
    }
    export.problems = problems;
    Ok(export)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(row: &Row, col: &str) -> Option<String> {
        row[col].text()
    }

    #[test]
    fn mysql_batch_output_is_unescaped() {
        let tsv = "id\tjob_desc\tglue_source\talarm_email\n\
                   1\tsay \"hi\", twice\t#!/bin/bash\\necho\\t'a'\\\\n\tNULL\n\
                   2\tb\t\t\\N\n";
        let e = read(tsv, Table::Jobs).unwrap();
        assert!(e.problems.is_empty(), "{:?}", e.problems);
        let rows = e.jobs.unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].at, "line 2");
        assert_eq!(text(&rows[0].row, "job_desc").unwrap(), "say \"hi\", twice");
        assert_eq!(
            text(&rows[0].row, "glue_source").unwrap(),
            "#!/bin/bash\necho\t'a'\\n"
        );
        assert_eq!(rows[0].row["alarm_email"], Cell::Null);
        assert_eq!(rows[1].row["alarm_email"], Cell::Null);
        assert_eq!(rows[1].row["glue_source"], Cell::Text(String::new()));
    }

    #[test]
    fn a_row_with_the_wrong_number_of_fields_is_named() {
        let tsv = "id\tjob_desc\n1\ta\n2\tb\textra\n3\tc\n";
        let e = read(tsv, Table::Jobs).unwrap();
        assert_eq!(e.jobs.as_ref().unwrap().len(), 2);
        assert_eq!(e.problems.len(), 1);
        assert_eq!(e.problems[0].at, "line 3");
        assert!(
            e.problems[0].message.contains("3 fields and the header 2"),
            "{:?}",
            e.problems
        );
    }

    #[test]
    fn csv_follows_rfc_4180() {
        let csv = "\u{feff}id,job_desc,glue_source,executor_param\r\n\
                   1,\"a, b\",\"line1\nline \"\"2\"\"\",NULL\r\n\
                   2,x,,\\N\r\n";
        let e = read(csv, Table::Jobs).unwrap();
        assert!(e.problems.is_empty(), "{:?}", e.problems);
        let rows = e.jobs.unwrap();
        assert_eq!(text(&rows[0].row, "job_desc").unwrap(), "a, b");
        assert_eq!(
            text(&rows[0].row, "glue_source").unwrap(),
            "line1\nline \"2\""
        );
        assert_eq!(rows[0].row["executor_param"], Cell::Null);
        assert_eq!(rows[1].at, "line 4", "the quoted line break counts");
        assert_eq!(rows[1].row["executor_param"], Cell::Null);
        let semi = read("id;app_name\n1;a\n", Table::Groups).unwrap();
        assert_eq!(text(&semi.groups.unwrap()[0].row, "app_name").unwrap(), "a");
    }

    #[test]
    fn a_file_without_a_header_is_refused() {
        let e = read("1\tdemo\t0\n", Table::Jobs).unwrap_err();
        assert!(e.contains("no column id"), "{e}");
        assert!(read("  \n", Table::Jobs).unwrap_err().contains("empty"));
    }

    #[test]
    fn json_shapes() {
        let arr = read(r#"[{"id": 1, "job_desc": "a", "x": true}, 5]"#, Table::Jobs).unwrap();
        assert_eq!(arr.jobs.as_ref().unwrap().len(), 1);
        assert_eq!(
            arr.jobs.as_ref().unwrap()[0].row["x"],
            Cell::Number(1.into())
        );
        assert_eq!(arr.problems[0].at, "element 2");

        let both = read(
            r#"{"xxl_job_info": [{"id": 1}], "xxl_job_group": [{"id": 1, "app_name": "a"}]}"#,
            Table::Jobs,
        )
        .unwrap();
        assert_eq!(both.jobs.unwrap().len(), 1);
        assert_eq!(both.groups.unwrap().len(), 1);

        let sh = read(
            r#"{"hasData": true, "rows": [{"id": 1, "app_name": "a"}]}"#,
            Table::Groups,
        )
        .unwrap();
        assert_eq!(sh.groups.unwrap().len(), 1);

        let pma = read(
            r#"[{"type":"header","version":"5.2.1"},{"type":"database","name":"xxl_job"},
                {"type":"table","name":"xxl_job_group","database":"xxl_job","data":[{"id":"1","app_name":"a"}]},
                {"type":"table","name":"xxl_job_info","database":"xxl_job","data":[{"id":"1"},{"id":"2","p":{"a":1}}]}]"#,
            Table::Jobs,
        )
        .unwrap();
        assert_eq!(pma.jobs.unwrap().len(), 1);
        assert_eq!(pma.groups.unwrap().len(), 1);
        assert_eq!(pma.problems[0].at, "xxl_job_info element 2");
        assert!(
            pma.problems[0].message.contains("column p"),
            "{:?}",
            pma.problems
        );

        let nd = read("{\"id\": 1}\n{\"id\": 2}\n", Table::Jobs).unwrap();
        assert_eq!(nd.jobs.unwrap().len(), 2);

        assert!(read("{\"id\": ", Table::Jobs)
            .unwrap_err()
            .contains("not valid JSON"));
        assert!(read(r#"{"other": []}"#, Table::Jobs)
            .unwrap_err()
            .contains("xxl_job_info"));
    }
}
