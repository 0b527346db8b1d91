//! `--corpus natural`: English prose that is already on any machine that runs ctxbench's
//! demo, found without a model hub or a download.
//!
//! The first choice is CPython's own documentation, `pydoc_data/topics.py` (the text behind
//! `help("topics")`: about 750 KB of English reference prose with code examples, shipped in
//! every CPython install, so on every machine that runs vLLM or SGLang and almost every
//! Linux box). It is a Python module whose strings hold the text, so the strings are
//! extracted ([`python_strings`]) and the Python syntax around them is dropped. Second
//! choice: `/usr/share/common-licenses` (Debian and Ubuntu; about 260 KB of licence prose).
//! The resolved file is recorded in the results header; texts differ between Python
//! versions, so two runs compare acceptance on the same text only when that path (and the
//! Python version in it) agree.

use std::path::{Path, PathBuf};

/// Where the common stdlib layouts keep `pydoc_data/topics.py`, beside `python3`'s own
/// answer.
const STDLIB_ROOTS: [&str; 4] = [
    "/usr/lib",
    "/usr/local/lib",
    "/opt/homebrew/lib",
    "/usr/lib64",
];

/// The Debian/Ubuntu licence folder, the fallback.
const LICENSES: &str = "/usr/share/common-licenses";

/// Finds the natural-text corpus: `python3`'s `pydoc_data/topics.py`, else one under the
/// usual stdlib folders, else `/usr/share/common-licenses`; `Err` names `--corpus PATH`.
pub fn resolve() -> Result<PathBuf, String> {
    if let Some(p) = from_python() {
        return Ok(p);
    }
    if let Some(p) = STDLIB_ROOTS
        .iter()
        .find_map(|r| in_stdlib_root(Path::new(r)))
    {
        return Ok(p);
    }
    let lic = Path::new(LICENSES);
    if lic.is_dir() {
        return Ok(lic.to_path_buf());
    }
    Err(format!(
        "--corpus natural: no natural text found on this machine (looked for Python's pydoc_data/topics.py via `python3` and under {}, then {LICENSES}); give your own text with --corpus PATH (a file or a folder of text files)",
        STDLIB_ROOTS.join(", ")
    ))
}

/// Asks `python3` where its `pydoc_data/topics.py` is (a venv or pyenv Python included).
fn from_python() -> Option<PathBuf> {
    let out = std::process::Command::new("python3")
        .args(["-c", "import pydoc_data.topics as t; print(t.__file__)"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    (out.status.success() && p.is_file()).then_some(p)
}

/// `ROOT/python3.*/pydoc_data/topics.py`, the newest version first.
fn in_stdlib_root(root: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(root)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .map(|e| e.path().join("pydoc_data").join("topics.py"))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop()
}

/// Whether `path` is a Python module whose string literals are the text.
pub fn is_python(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "py")
}

/// The contents of every string literal of a Python source, in order, escapes decoded
/// (`'…'`, `"…"`, triple-quoted, `r` prefixes); comments and code are dropped. Adjacent
/// literals are concatenated as Python does, so a paragraph split over lines reads whole.
pub fn python_strings(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            '#' => {
                while i < b.len() && b[i] != '\n' {
                    i += 1;
                }
            }
            q @ ('\'' | '"') => {
                let raw = i > 0 && matches!(b[i - 1], 'r' | 'R');
                let triple = b.get(i + 1) == Some(&q) && b.get(i + 2) == Some(&q);
                let (open, end) = if triple { (3, 3) } else { (1, 1) };
                i += open;
                while let Some(&c) = b.get(i) {
                    if c == q && (!triple || (b.get(i + 1) == Some(&q) && b.get(i + 2) == Some(&q)))
                    {
                        i += end;
                        break;
                    }
                    if c == '\\' && i + 1 < b.len() {
                        let n = b[i + 1];
                        if raw {
                            out.push(c);
                            out.push(n);
                        } else {
                            match n {
                                'n' => out.push('\n'),
                                't' => out.push('\t'),
                                '\n' => {}
                                other => out.push(other),
                            }
                        }
                        i += 2;
                        continue;
                    }
                    out.push(c);
                    i += 1;
                }
                // Literals Python concatenates (only whitespace between) read as one;
                // others (a key, then its value) are separate lines.
                let mut j = i;
                while j < b.len() && b[j].is_whitespace() {
                    j += 1;
                }
                let next_is_literal = matches!(b.get(j), Some('\'' | '"'))
                    || (matches!(b.get(j), Some('r' | 'R'))
                        && matches!(b.get(j + 1), Some('\'' | '"')));
                if !next_is_literal {
                    out.push('\n');
                }
            }
            _ => i += 1,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_strings_reads_the_text_and_drops_the_code() {
        let src = "# -*- coding: utf-8 -*-\ntopics = {'assert': 'The \"assert\" statement\\n'\n           'is here.  It\\'s fine\\n',\n 'x': r'''raw \\d\n''' \"end\"}\n";
        assert_eq!(
            python_strings(src),
            "assert\nThe \"assert\" statement\nis here.  It's fine\n\nx\nraw \\d\nend\n"
        );
    }

    #[test]
    fn the_installed_documentation_reads_as_prose() {
        let Ok(p) = resolve() else { return };
        if !is_python(&p) {
            return;
        }
        let text = python_strings(&std::fs::read_to_string(&p).unwrap());
        assert!(
            text.len() > 200_000,
            "{} bytes from {}",
            text.len(),
            p.display()
        );
        assert!(!text.contains("topics = {"), "the code is dropped");
        // The source's line joins (`…\\n'` newline, indent, `'…`) are gone.
        assert!(!text.contains("\\n'\n    "), "escapes are decoded");
        assert!(text.contains("statement"), "English prose");
    }

    #[test]
    fn resolve_finds_text_or_names_the_way_out() {
        match resolve() {
            Ok(p) => assert!(p.exists(), "{}", p.display()),
            Err(e) => assert!(e.contains("--corpus PATH"), "{e}"),
        }
    }
}
