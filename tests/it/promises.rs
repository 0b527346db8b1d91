//! docs/promises.md maps every `--help` flag and README promise to the tests that keep it,
//! each named by its module path. This fails when a flag has no row, or a row names a test
//! that is not in the file its path names.

use std::path::{Path, PathBuf};
use std::process::Command;

const COMMANDS: &[&str] = &[
    "sweep",
    "report",
    "compare",
    "import",
    "replay",
    "overhead",
    "completions",
    "man",
];

/// Subcommands listed by `ctxbench --help` (without `help` itself).
fn subcommands() -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_ctxbench"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "ctxbench --help");
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Long flags listed by `ctxbench <cmd> --help` (without `--help` itself).
fn help_flags(cmd: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_ctxbench"))
        .args([cmd, "--help"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{cmd} --help");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut flags: Vec<String> = text
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| {
            l.split([' ', ','])
                .find(|w| w.starts_with("--"))
                .map(str::to_owned)
        })
        .filter(|f| f != "--help" && f != "--version")
        .collect();
    flags.dedup();
    flags
}

/// (first cell, test names in backticks of the second cell) of every table row.
fn rows() -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(root().join("docs/promises.md")).unwrap();
    text.lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("|---"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").collect();
            let [key, tests] = cells[..] else {
                panic!("a row has two cells: {l}")
            };
            let names = tests
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect();
            (key.trim().trim_matches('`').to_owned(), names)
        })
        .filter(|(k, _)| k != "Flag" && k != "Promise" && k != "Subcommand")
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Names of the `#[test]` functions in one file.
fn tests_in(file: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(file) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    let mut after_test = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with("#[test]") || line.starts_with("#[tokio::test") {
            after_test = true;
        } else if after_test {
            let rest = line
                .strip_prefix("async fn ")
                .or_else(|| line.strip_prefix("fn "));
            if let Some(rest) = rest {
                names.push(rest.split('(').next().unwrap().to_owned());
                after_test = false;
            }
        }
    }
    names
}

/// Where library modules live: the binary's `src/` and every workspace crate's `src/`.
fn source_roots() -> Vec<PathBuf> {
    let mut roots = vec![root().join("src")];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path().join("src"))
        .filter(|p| p.is_dir())
        .collect();
    crates.sort();
    roots.extend(crates);
    roots
}

/// The file a test's module path names: `it::m::name` → tests/it/m.rs, `cmd::m::name` →
/// src/cmd/m.rs (the binary), `ctxbench_x::a::b::name` → crates/x/src/a/b.rs (or a/b/mod.rs,
/// or lib.rs for a test at the crate's root).
fn file_of(path: &str) -> Option<PathBuf> {
    let (module, _) = path.rsplit_once("::")?;
    let (base, module) = if let Some(m) = module.strip_prefix("it::") {
        (root().join("tests/it"), m.to_owned())
    } else if module.starts_with("cmd") {
        (root().join("src"), module.to_owned())
    } else {
        let (krate, m) = module.split_once("::").unwrap_or((module, ""));
        let dir = krate.strip_prefix("ctxbench_")?;
        (root().join("crates").join(dir).join("src"), m.to_owned())
    };
    if module.is_empty() {
        return Some(base.join("lib.rs")).filter(|p| p.is_file());
    }
    let rel = module.replace("::", "/");
    [
        base.join(format!("{rel}.rs")),
        base.join(format!("{rel}/mod.rs")),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// Every `#[test]` function name in tests/, src/ and the crates' src/.
fn test_functions() -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&root().join("tests"), &mut files);
    for r in source_roots() {
        rust_files(&r, &mut files);
    }
    files.iter().flat_map(|f| tests_in(f)).collect()
}

#[test]
fn every_help_flag_has_a_row_in_the_promise_list() {
    let keys: Vec<String> = rows().into_iter().map(|(k, _)| k).collect();
    let missing: Vec<String> = COMMANDS
        .iter()
        .flat_map(|c| help_flags(c).into_iter().map(move |f| format!("{c} {f}")))
        .filter(|k| !keys.contains(k))
        .collect();
    assert!(
        missing.is_empty(),
        "flags in --help with no row in docs/promises.md (add the row and its tests): {missing:?}"
    );
}

#[test]
fn every_subcommand_has_a_row_and_its_flags_are_checked() {
    let keys: Vec<String> = rows().into_iter().map(|(k, _)| k).collect();
    let subs = subcommands();
    assert!(subs.contains(&"sweep".to_owned()), "{subs:?}");
    for sub in subs {
        assert!(
            keys.contains(&sub),
            "subcommand `{sub}` has no row in docs/promises.md"
        );
        assert!(
            COMMANDS.contains(&sub.as_str()),
            "subcommand `{sub}` missing from COMMANDS, so its flags go unchecked"
        );
    }
}

#[test]
fn every_row_names_tests_that_exist_in_the_file_their_path_names() {
    assert!(
        test_functions().len() > 100,
        "found only {} test functions",
        test_functions().len()
    );
    for (key, names) in rows() {
        assert!(!names.is_empty(), "{key}: no test named");
        for n in names {
            let file = file_of(&n).unwrap_or_else(|| {
                panic!("{key}: `{n}` names no file (`it::module::test`, `cmd::module::test` or `ctxbench_crate::module::test`)")
            });
            let test = n.rsplit("::").next().unwrap_or_default();
            assert!(
                tests_in(&file).iter().any(|t| t == test),
                "{key}: `{test}` is not a test function in {}",
                file.display()
            );
        }
    }
}

#[test]
fn a_module_path_names_its_file() {
    // Guards the check above against a reader that resolves nothing (and so misses nothing).
    let f = file_of("it::promises::a_module_path_names_its_file").expect("this file");
    assert!(tests_in(&f).contains(&"a_module_path_names_its_file".to_owned()));
    assert!(file_of("ctxbench_session::sample::x")
        .is_some_and(|p| p.ends_with("crates/session/src/sample.rs")));
    assert!(file_of("ctxbench_client::openai::x")
        .is_some_and(|p| p.ends_with("crates/client/src/openai.rs")));
    assert!(file_of("ctxbench_client::x").is_some_and(|p| p.ends_with("crates/client/src/lib.rs")));
    assert!(
        file_of("sample::x").is_none(),
        "a path without its crate names no file"
    );
    assert!(file_of("cmd::cli::x").is_some_and(|p| p == root().join("src/cmd/cli.rs")));
    assert!(file_of("it::no_such_module::x").is_none());
}

#[test]
fn the_help_flag_reader_finds_the_flags_of_every_command() {
    // Guards the check above against a reader that finds nothing (and so misses nothing).
    let sweep = help_flags("sweep");
    for f in ["--url", "--contexts", "--out", "--quiet", "--metrics-url"] {
        assert!(sweep.contains(&f.to_owned()), "{f} in {sweep:?}");
    }
    assert!(help_flags("compare").contains(&"--noise".to_owned()));
}
