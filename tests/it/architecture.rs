//! docs/architecture.md's crate table held against the code, so the doc cannot drift: each
//! crate's modules (its lib.rs), its workspace dependencies (its Cargo.toml), and from
//! Cargo.lock that the crates building reports reach no async runtime or HTTP client.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The backticked words of one table cell.
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// (crate, folder, modules, workspace dependencies) of each row of the doc's crate table,
/// the root crate left out.
fn doc_rows() -> Vec<(String, String, BTreeSet<String>, BTreeSet<String>)> {
    let text = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    text.lines()
        .filter(|l| l.starts_with("| `ctxbench-"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").collect();
            let names = ticked(cells[0]);
            (
                names[0].clone(),
                names[1].clone(),
                ticked(cells[1]).into_iter().collect(),
                ticked(cells[2]).into_iter().collect(),
            )
        })
        .collect()
}

/// The `pub mod` names of a crate's lib.rs.
fn modules(folder: &str) -> BTreeSet<String> {
    let lib = std::fs::read_to_string(root().join(folder).join("src/lib.rs")).unwrap();
    lib.lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').trim().to_owned())
        .collect()
}

/// The `ctxbench-*` names under a crate's `[dependencies]`.
fn workspace_deps(folder: &str) -> BTreeSet<String> {
    let toml = std::fs::read_to_string(root().join(folder).join("Cargo.toml")).unwrap();
    toml.lines()
        .skip_while(|l| l.trim() != "[dependencies]")
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .filter_map(|l| l.split('=').next())
        .map(str::trim)
        .filter(|n| n.starts_with("ctxbench-"))
        .map(str::to_owned)
        .collect()
}

/// Cargo.lock as package → its dependencies' names.
fn lock_graph() -> BTreeMap<String, Vec<String>> {
    let lock = std::fs::read_to_string(root().join("Cargo.lock")).unwrap();
    let mut graph = BTreeMap::new();
    for block in lock.split("[[package]]").skip(1) {
        let name = block
            .lines()
            .find_map(|l| l.strip_prefix("name = "))
            .unwrap()
            .trim_matches('"')
            .to_owned();
        let deps: Vec<String> = block
            .lines()
            .skip_while(|l| !l.starts_with("dependencies = ["))
            .skip(1)
            .take_while(|l| !l.starts_with(']'))
            .map(|l| {
                // `"name"` or `"name version"` when several versions are locked.
                let d = l.trim().trim_end_matches(',').trim_matches('"');
                d.split(' ').next().unwrap_or(d).to_owned()
            })
            .collect();
        graph.insert(name, deps);
    }
    graph
}

/// Every package `name` depends on, directly or not.
fn reach(graph: &BTreeMap<String, Vec<String>>, name: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![name.to_owned()];
    while let Some(n) = todo.pop() {
        for d in graph.get(&n).into_iter().flatten() {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
}

#[test]
fn the_crate_table_names_every_crate_with_its_modules_and_dependencies() {
    let rows = doc_rows();
    let documented: BTreeSet<String> = rows.iter().map(|r| r.1.clone()).collect();
    let on_disk: BTreeSet<String> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|e| format!("crates/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    assert_eq!(documented, on_disk, "crates in the doc vs crates/ on disk");
    for (name, folder, mods, deps) in rows {
        assert_eq!(
            mods,
            modules(&folder),
            "{name}: modules in the doc vs its lib.rs"
        );
        assert_eq!(
            deps,
            workspace_deps(&folder),
            "{name}: workspace dependencies in the doc vs its Cargo.toml"
        );
    }
}

#[test]
fn the_crates_that_build_reports_reach_no_async_runtime_or_http_client() {
    let graph = lock_graph();
    // Guards the check against a reader that finds nothing: the client crate does reach them.
    let client = reach(&graph, "ctxbench-client");
    assert!(
        client.contains("tokio") && client.contains("reqwest"),
        "{client:?}"
    );
    for krate in [
        "ctxbench-schema",
        "ctxbench-stats",
        "ctxbench-render",
        "ctxbench-trace",
    ] {
        let deps = reach(&graph, krate);
        assert!(deps.contains("serde"), "{krate}: {deps:?}");
        for net in ["tokio", "hyper", "reqwest", "mio"] {
            assert!(!deps.contains(net), "{krate} reaches {net}");
        }
    }
}

mod imports;

/// Every crate's source folder: `crates/*/src` and the binary's `src`.
fn source_folders() -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<_> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .collect();
    dirs.push(root().join("src"));
    dirs.sort();
    dirs
}

#[test]
fn no_two_modules_of_a_crate_import_each_other_counting_inline_paths() {
    let mut found = Vec::new();
    for src in source_folders() {
        let g = imports::graph(&src);
        assert!(!g.files.is_empty(), "{}: no modules read", src.display());
        if std::env::var_os("CTXBENCH_IMPORTS_DEBUG").is_some() {
            eprintln!("{}: {:#?}", src.display(), g.edges);
        }
        for lp in imports::loops(&g) {
            let detail: Vec<String> = lp
                .iter()
                .map(|m| {
                    let to: Vec<&str> = g.edges[m]
                        .iter()
                        .filter(|t| lp.contains(t))
                        .map(|t| if t.is_empty() { "(root)" } else { t.as_str() })
                        .collect();
                    format!(
                        "{} -> {}",
                        if m.is_empty() { "(root)" } else { m },
                        to.join(", ")
                    )
                })
                .collect();
            found.push(format!("{}: {}", src.display(), detail.join("; ")));
        }
    }
    assert!(found.is_empty(), "import loops:\n{}", found.join("\n"));
}

#[test]
fn the_import_check_sees_a_loop_through_inline_paths_and_groups() {
    // Guards the check against a reader that finds nothing: a loop written only with an
    // inline `crate::` path and a `use super::{…}` group, with decoys in strings and comments;
    // a test module reaching back into its file is no loop (nothing imports a test module).
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir(src.join("a")).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "pub mod a;\npub mod b;\npub fn f() {}\n",
    )
    .unwrap();
    std::fs::write(
        src.join("a.rs"),
        "pub mod c;\n// crate::b::g()\nfn x() { let _ = \"crate::b\"; crate::b::g(); }\n\
         #[cfg(test)]\nmod tests { fn t() { super::x(); } }\n",
    )
    .unwrap();
    std::fs::write(src.join("b.rs"), "pub fn g() {}\n").unwrap();
    std::fs::write(src.join("a/c.rs"), "use super::{super::b, x};\n").unwrap();
    let g = imports::graph(src);
    assert!(imports::loops(&g).is_empty(), "{:?}", g.edges);
    assert!(g.edges["a"].contains("b"), "{:?}", g.edges);
    assert!(g.edges["a::c"].contains("a"), "{:?}", g.edges);
    assert!(g.edges["a::tests"].contains("a"), "{:?}", g.edges);
    // Now b calls back into a inline: a loop.
    std::fs::write(src.join("b.rs"), "pub fn g() { crate::a::x(); }\n").unwrap();
    let g = imports::graph(src);
    assert_eq!(
        imports::loops(&g),
        vec![vec!["a".to_owned(), "b".to_owned()]]
    );
    // A child naming its parent's item through the root is a loop with the root.
    std::fs::write(src.join("b.rs"), "pub fn g() { crate::f(); }\n").unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "pub mod a;\npub mod b;\npub fn f() { b::g() }\n",
    )
    .unwrap();
    let g = imports::graph(src);
    assert_eq!(
        imports::loops(&g),
        vec![vec![String::new(), "b".to_owned()]]
    );
}

#[test]
fn an_inline_super_path_to_a_sibling_imports_the_parent_as_the_stop_hook_counts() {
    // m declares and calls x; x calls its sibling y inline through `super`: counted as an
    // import of m (a loop), while the same path on a `use` line names y (no loop). A
    // top-level file's inline `super::` is not counted as importing the root.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir(src.join("m")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod m;\npub mod z;\n").unwrap();
    std::fs::write(
        src.join("m.rs"),
        "pub mod x;\npub mod y;\npub fn f() { x::g() }\n",
    )
    .unwrap();
    std::fs::write(src.join("m/y.rs"), "pub fn h() {}\n").unwrap();
    std::fs::write(src.join("z.rs"), "pub fn k() { super::m::f() }\n").unwrap();
    std::fs::write(src.join("m/x.rs"), "pub fn g() { super::y::h() }\n").unwrap();
    let g = imports::graph(src);
    assert_eq!(
        imports::loops(&g),
        vec![vec!["m".to_owned(), "m::x".to_owned()]],
        "{:?}",
        g.edges
    );
    assert!(g.edges["z"].contains("m"), "{:?}", g.edges);
    std::fs::write(src.join("m/x.rs"), "use super::y::h;\npub fn g() { h() }\n").unwrap();
    let g = imports::graph(src);
    assert!(imports::loops(&g).is_empty(), "{:?}", g.edges);
    assert!(g.edges["m::x"].contains("m::y"), "{:?}", g.edges);
}

#[test]
fn a_library_crates_lib_rs_declares_no_type_trait_or_impl() {
    let mut found = Vec::new();
    for src in source_folders() {
        let lib = src.join("lib.rs");
        let Ok(text) = std::fs::read_to_string(&lib) else {
            continue;
        };
        let mut in_tests = false;
        for (n, line) in text.lines().enumerate() {
            // A `#[cfg(test)] mod tests { … }` block is the registry's tests, not its items.
            if line.starts_with("mod tests {") {
                in_tests = true;
            }
            let item = line
                .trim_start_matches("pub ")
                .trim_start_matches("pub(crate) ");
            let declares = [
                "struct ", "enum ", "trait ", "impl ", "impl<", "type ", "union ",
            ]
            .iter()
            .any(|k| item.starts_with(k));
            if declares && !in_tests {
                found.push(format!("{}:{}: {line}", lib.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "types in a crate's front door:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_file_the_architecture_page_names_exists() {
    let text = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let named: Vec<String> = ticked(&text)
        .into_iter()
        .map(|t| t.split("::").next().unwrap_or_default().to_owned())
        .filter(|t| {
            ["crates/", "src/", "tests/", "scripts/", "docs/"]
                .iter()
                .any(|p| t.starts_with(p))
        })
        .collect();
    assert!(named.len() > 20, "found only {named:?}");
    let missing: Vec<&String> = named.iter().filter(|p| !root().join(p).exists()).collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md names missing paths: {missing:?}"
    );
}
