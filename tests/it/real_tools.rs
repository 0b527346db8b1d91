//! The field's tools, installed for real from PyPI (scripts/result-tools): ctxbench results
//! load into DuckDB as they are (docs/interop.md's query, over several runs and an imported
//! one), and the tools' fixtures re-record against the reference llama-server
//! (scripts/record-tool-fixtures) and still import. In the real-servers group: the first run
//! installs the tools.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::ctxbench;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn tmpdir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The command of a tool from scripts/result-tools (installed if missing; fails, never skips).
fn tool(name: &str) -> PathBuf {
    let o = Command::new(root().join("scripts/result-tools"))
        .args([name, "--bin"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "scripts/result-tools {name}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    PathBuf::from(String::from_utf8(o.stdout).unwrap().trim())
}

/// The query of docs/interop.md (kept in one place: the doc's SQL block is read from it).
fn doc_query() -> String {
    let doc = std::fs::read_to_string(root().join("docs/interop.md")).unwrap();
    let start = doc
        .find("```sql\n")
        .expect("docs/interop.md has a ```sql block")
        + 7;
    let end = start + doc[start..].find("```").unwrap();
    doc[start..end].to_owned()
}

#[test]
fn duckdb_reads_results_files_as_they_are_with_the_documented_query() {
    let dir = tmpdir("duckdb");
    let runs = dir.join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    for f in ["sweep.jsonl", "precision.jsonl", "two-point.jsonl"] {
        std::fs::copy(
            root().join("crates/schema/testdata/golden").join(f),
            runs.join(f),
        )
        .unwrap();
    }
    // An imported run loads the same way.
    let o = ctxbench()
        .arg("import")
        .arg(root().join("tests/fixtures/vllm-bench/vllm-bench-random-128.json"))
        .arg("--out")
        .arg(runs.join("vllm-bench.jsonl"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let py = tool("duckdb");
    let o = Command::new(&py)
        .current_dir(&dir)
        .args([
            "-c",
            "import sys, duckdb; print(duckdb.sql(sys.argv[1]).fetchall())",
        ])
        .arg(doc_query())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "duckdb: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // One row per run and length: the golden sweep's two kept samples at 1024 and 2048, and
    // the imported run's 19 completed requests at 128 tokens.
    assert!(
        out.contains("('sweep.jsonl', 'llama.cpp', 1024, 2,"),
        "{out}"
    );
    assert!(
        out.contains("('sweep.jsonl', 'llama.cpp', 2048, 2,"),
        "{out}"
    );
    assert!(
        out.contains("('precision.jsonl', 'llama.cpp', 1024, 7,"),
        "{out}"
    );
    assert!(
        out.contains("('vllm-bench.jsonl', 'unknown (not probed: imported)', 128, 19,"),
        "{out}"
    );
}

#[test]
fn tool_fixtures_re_record_and_import() {
    let dir = tmpdir("tool-fixtures");
    let o = Command::new(root().join("scripts/record-tool-fixtures"))
        .args(["aiperf", "guidellm", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "record-tool-fixtures: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    for (files, tool) in [
        (
            vec![dir.join("aiperf/isl-128/profile_export_aiperf.json")],
            "aiperf",
        ),
        (
            vec![dir.join("guidellm/prompt-128/benchmarks.json")],
            "guidellm",
        ),
    ] {
        let out = dir.join(format!("{tool}.jsonl"));
        let o = ctxbench()
            .arg("import")
            .args(&files)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{tool}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(text.contains("cache state per request known"), "{text}");
    }
}
