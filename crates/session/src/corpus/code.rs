//! `--corpus code`: source code long enough for any context a server offers, found without a
//! download: the Python standard library of this machine (what agent contexts hold is mostly
//! code). Every `.py` file below the stdlib folder except the test suite (`test/`, `tests/`,
//! `idle_test/`: Debian ships it in a package of its own, so it is not on every machine) and
//! installed packages (`site-packages/`, `dist-packages/`: they differ between machines), in
//! byte order of their paths relative to the folder, each after a `# file: PATH` line (as a
//! context of concatenated files carries them). CPython 3.8 and later hold 10–13 MB of such
//! source, millions of tokens: no prompt wraps around it. The resolved folder is recorded in
//! the results header, with the bytes tokenized and their hash; the text differs between
//! Python versions, so two runs compare acceptance on the same text when the hash agrees.

use std::path::{Path, PathBuf};

/// Where the common stdlib layouts keep `python3.*`, beside `python3`'s own answer.
const STDLIB_ROOTS: [&str; 4] = [
    "/usr/lib",
    "/usr/local/lib",
    "/opt/homebrew/lib",
    "/usr/lib64",
];

/// Folders left out: the test suite and installed packages (see the module docs).
const SKIPPED_DIRS: [&str; 6] = [
    "test",
    "tests",
    "idle_test",
    "site-packages",
    "dist-packages",
    "__pycache__",
];

/// The least source a stdlib must hold to be taken: 256k tokens at 8 bytes a token (code
/// tokenizes at 2.5–4.5 bytes a token in the tokenizers we know), so a 256k prompt never
/// wraps even under a tokenizer twice as coarse as any seen.
pub const MIN_BYTES: u64 = 256 * 1024 * 8;

/// Finds the code corpus: `python3`'s stdlib folder, else the newest `python3.*` under the
/// usual roots; `Err` names `--corpus PATH`.
pub fn resolve() -> Result<PathBuf, String> {
    let found = from_python().or_else(|| {
        STDLIB_ROOTS
            .iter()
            .find_map(|r| in_stdlib_root(Path::new(r)))
    });
    match found {
        Some(p) => {
            let bytes: u64 = files(&p)
                .iter()
                .filter_map(|f| std::fs::metadata(f).ok())
                .map(|m| m.len())
                .sum();
            if bytes >= MIN_BYTES {
                Ok(p)
            } else {
                Err(format!(
                    "--corpus code: the Python standard library at {} holds only {bytes} bytes of source (at least {MIN_BYTES} wanted); give your own code with --corpus PATH (a folder of source files)",
                    p.display()
                ))
            }
        }
        None => Err(format!(
            "--corpus code: no Python standard library found on this machine (asked `python3`, then looked under {}); give your own code with --corpus PATH (a folder of source files)",
            STDLIB_ROOTS.join(", ")
        )),
    }
}

/// Asks `python3` where its standard library is (a venv or pyenv Python included).
fn from_python() -> Option<PathBuf> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['stdlib'])",
        ])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    (out.status.success() && p.join("os.py").is_file()).then_some(p)
}

/// `ROOT/python3.*` holding `os.py`, the newest version first.
fn in_stdlib_root(root: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(root)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path())
        .filter(|p| p.join("os.py").is_file())
        .collect();
    // python3.9 < python3.10 < python3.11: by the minor version's number, not by name.
    found.sort_by_key(|p| {
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        name.strip_prefix("python3.")
            .and_then(|m| m.parse::<u32>().ok())
            .unwrap_or(0)
    });
    found.pop()
}

/// Every `.py` file of the corpus below `root`, in byte order of the relative paths.
pub fn files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    collect(root, &mut out);
    out.sort();
    out
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let path = e.path();
        // Not followed: a symlinked folder could loop or leave the stdlib.
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_dir() {
            if !SKIPPED_DIRS.contains(&name.as_str()) {
                collect(&path, out);
            }
        } else if kind.is_file() && name.ends_with(".py") {
            out.push(path);
        }
    }
}

/// One file as it enters the corpus: a `# file: PATH` line (relative to `root`), then its
/// text; `None` for files that are not UTF-8 (a few test data files of some versions).
pub fn entry(root: &Path, file: &Path) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    let rel = file.strip_prefix(root).unwrap_or(file);
    Some(format!("# file: {}\n{text}\n", rel.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_corpus_holds_more_than_256k_tokens_of_source_so_it_never_wraps() {
        let root = match resolve() {
            Ok(p) => p,
            // A host without Python: the error says what to do instead.
            Err(e) => return assert!(e.contains("--corpus PATH"), "{e}"),
        };
        let fs = files(&root);
        let bytes: u64 = fs
            .iter()
            .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
            .sum();
        // 8 bytes a token is coarser than any tokenizer on code: 256k tokens at least.
        assert!(
            bytes / 8 >= 256 * 1024,
            "{} files, {bytes} bytes under {}",
            fs.len(),
            root.display()
        );
        assert!(fs.iter().all(|f| f.extension().is_some_and(|e| e == "py")));
        assert!(
            !fs.iter().any(|f| f
                .components()
                .any(|c| c.as_os_str() == "site-packages" || c.as_os_str() == "test")),
            "installed packages and the test suite are left out"
        );
        // Deterministic: the same list twice, in path order.
        assert_eq!(fs, files(&root));
        assert!(fs.windows(2).all(|w| w[0] < w[1]));
        let first = entry(&root, &fs[0]).expect("UTF-8 source");
        assert!(first.starts_with("# file: "), "{first}");
    }

    #[test]
    fn the_newest_stdlib_under_a_root_is_taken_by_version_number() {
        let dir = tempfile::tempdir().unwrap();
        for v in ["python3.9", "python3.11", "python3.10"] {
            let d = dir.path().join(v);
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("os.py"), "import sys\n").unwrap();
        }
        std::fs::create_dir(dir.path().join("python3.12")).unwrap(); // no os.py: not a stdlib
        assert_eq!(
            in_stdlib_root(dir.path()),
            Some(dir.path().join("python3.11"))
        );
    }

    #[test]
    fn tests_and_installed_packages_are_left_out_and_files_come_in_path_order() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        for f in [
            "b.py",
            "a/z.py",
            "a/y.txt",
            "test/t.py",
            "site-packages/p.py",
            "a/tests/u.py",
            ".hidden/h.py",
        ] {
            let p = r.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, "x = 1\n").unwrap();
        }
        assert_eq!(files(r), vec![r.join("a/z.py"), r.join("b.py")]);
        assert_eq!(
            entry(r, &r.join("a/z.py")).unwrap(),
            "# file: a/z.py\nx = 1\n\n"
        );
    }
}
