//! The import graph inside one crate, counted as the compiler resolves paths: `use` lines and
//! inline paths alike (`crate::x::f()`, `super::x::f()`, `self::x`, and a child module named
//! from its parent), so a loop cannot hide in a function body. Strings and comments are
//! skipped; inline `mod` blocks (tests) belong to their file, and their `super` is the file.
//! One exception, as the stop hook counts: an inline `super::x::f()` in m/y.rs names m's item,
//! an import of m itself, whatever x is (a `use super::x::f` line names module x); m is not
//! the crate root.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module: its path inside the crate (`""` for the root, `"a::b"`).
type Module = String;

/// One crate's modules (from its file tree) and the edges between them.
pub struct Graph {
    /// Each module and the modules it names.
    pub edges: BTreeMap<Module, BTreeSet<Module>>,
    /// Each module's file, for messages.
    pub files: BTreeMap<Module, PathBuf>,
}

/// The module path of a source file under `src`: `lib.rs`/`main.rs` → root, `a/mod.rs` and
/// `a.rs` → `a`, `a/b.rs` → `a::b`.
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "mod" | "lib" | "main") || !parts.is_empty() && stem != "mod" {
        parts.push(stem.to_owned());
    }
    parts.join("::")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Source text with comments, string and char literals blanked (lengths kept).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(if b[i] == b'\n' { b'\n' } else { b' ' });
                    i += 1;
                }
            }
        } else if rest.starts_with(b"r\"") || rest.starts_with(b"r#") {
            // Raw string: r"…" or r#…#"…"#…#.
            let mut j = i + 1;
            let mut hashes = 0;
            while j < b.len() && b[j] == b'#' {
                hashes += 1;
                j += 1;
            }
            if j < b.len() && b[j] == b'"' && (i == 0 || !is_ident(b[i - 1])) {
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                let end = b[j + 1..]
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .map_or(b.len(), |p| j + 1 + p + close.len());
                out.extend(
                    b[i..end]
                        .iter()
                        .map(|&c| if c == b'\n' { b'\n' } else { b' ' }),
                );
                i = end;
            } else {
                out.push(b[i]);
                i += 1;
            }
        } else if b[i] == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                let n = if b[i] == b'\\' { 2 } else { 1 };
                for _ in 0..n.min(b.len() - i) {
                    out.push(if b[i] == b'\n' { b'\n' } else { b' ' });
                    i += 1;
                }
            }
            out.push(b' ');
            i += 1;
        } else if b[i] == b'\'' && is_char_literal(&b[i..]) {
            let len = char_literal_len(&b[i..]);
            out.extend(std::iter::repeat_n(b' ', len));
            i += len;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// `'x'`, `'\n'`, `'\u{1F600}'` or a multibyte char, not a lifetime (`'a`).
fn is_char_literal(b: &[u8]) -> bool {
    char_literal_len(b) > 0
}

fn char_literal_len(b: &[u8]) -> usize {
    if b.len() >= 4 && b[1] == b'\\' {
        return b[2..].iter().position(|&c| c == b'\'').map_or(0, |p| p + 3);
    }
    // One UTF-8 character then a quote.
    let width = match b.get(1) {
        Some(&c) if c < 0x80 => 1,
        Some(&c) if c >= 0xF0 => 4,
        Some(&c) if c >= 0xE0 => 3,
        Some(_) => 2,
        None => return 0,
    };
    if b.get(1 + width) == Some(&b'\'') {
        width + 2
    } else {
        0
    }
}

/// One path of a file's code.
struct Found {
    /// Its segments (`super`, `x`, `f`).
    segs: Vec<String>,
    /// The inline module (relative to the file's) it was written in.
    scope: Vec<String>,
    /// Whether a `use` line names it (else it is written inline, in code).
    in_use: bool,
}

/// The paths of one file's code.
fn paths(code: &str) -> Vec<Found> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut inline: Vec<(String, i32)> = Vec::new(); // (name, brace depth at its opening)
    let mut depth = 0i32;
    let mut in_use = false;
    let mut i = 0;
    let word_at = |i: usize| -> (String, usize) {
        let mut j = i;
        while j < b.len() && is_ident(b[j]) {
            j += 1;
        }
        (code[i..j].to_owned(), j)
    };
    while i < b.len() {
        let c = b[i];
        if c == b'{' {
            depth += 1;
            i += 1;
            continue;
        }
        if c == b';' {
            in_use = false;
            i += 1;
            continue;
        }
        if c == b'}' {
            depth -= 1;
            if inline.last().is_some_and(|(_, d)| *d == depth) {
                inline.pop();
            }
            i += 1;
            continue;
        }
        if !is_ident(c) || (i > 0 && (is_ident(b[i - 1]) || b[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let (w, j) = word_at(i);
        if w == "use" {
            in_use = true;
            i = j;
            continue;
        }
        if w == "mod" {
            // `mod name {` opens an inline module; `mod name;` declares a file.
            let k = skip_ws(b, j);
            let (name, k2) = word_at(k);
            let k3 = skip_ws(b, k2);
            if !name.is_empty() && b.get(k3) == Some(&b'{') {
                inline.push((name, depth));
                depth += 1;
                i = k3 + 1;
                continue;
            }
            i = j;
            continue;
        }
        let scope: Vec<String> = inline.iter().map(|(n, _)| n.clone()).collect();
        let (mut segs, end) = path_from(code, i);
        if segs.len() >= 2 || b.get(end) == Some(&b'{') {
            // A group `prefix::{a::x, b}`: one path per top-level element.
            if b.get(end) == Some(&b'{') {
                let close = matching_brace(b, end);
                for item in split_top(&code[end + 1..close]) {
                    let item = item.trim();
                    if item.is_empty() {
                        continue;
                    }
                    let (more, _) = path_from(item, 0);
                    let mut p = segs.clone();
                    p.extend(more);
                    out.push(Found {
                        segs: p,
                        scope: scope.clone(),
                        in_use,
                    });
                }
                segs.clear();
                // Past the group's closing brace: its braces are not blocks.
                i = close + 1;
                continue;
            }
            out.push(Found {
                segs: std::mem::take(&mut segs),
                scope,
                in_use,
            });
        }
        i = end.max(j);
    }
    out
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The `a::b::c` path starting at `i` (segments), and where it ends (past a trailing `::`).
fn path_from(code: &str, i: usize) -> (Vec<String>, usize) {
    let b = code.as_bytes();
    let mut segs = Vec::new();
    let mut j = i;
    loop {
        let start = j;
        while j < b.len() && is_ident(b[j]) {
            j += 1;
        }
        if j == start {
            break;
        }
        segs.push(code[start..j].to_owned());
        let k = skip_ws(b, j);
        if b[k..].starts_with(b"::") {
            j = skip_ws(b, k + 2);
        } else {
            break;
        }
    }
    (segs, j)
}

fn matching_brace(b: &[u8], open: usize) -> usize {
    let mut depth = 0;
    for (k, &c) in b.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    b.len()
}

fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (k, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

/// The deepest module of `mods` that `segs` walks into from `start`.
fn walk(mods: &BTreeSet<Module>, start: &[String], segs: &[String]) -> Module {
    let mut cur: Vec<String> = start.to_vec();
    for s in segs {
        let mut next = cur.clone();
        next.push(s.clone());
        if mods.contains(&next.join("::")) {
            cur = next;
        } else {
            break;
        }
    }
    cur.join("::")
}

/// The import graph of the crate whose sources are under `src`.
pub fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let by_module: BTreeMap<Module, PathBuf> = files
        .iter()
        .map(|f| (module_of(src, f), f.clone()))
        .collect();
    let mods: BTreeSet<Module> = by_module.keys().cloned().collect();
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &by_module {
        let code = code_only(&std::fs::read_to_string(file).unwrap_or_default());
        let here: Vec<String> = if module.is_empty() {
            Vec::new()
        } else {
            module.split("::").map(str::to_owned).collect()
        };
        for Found {
            segs,
            scope,
            in_use,
        } in paths(&code)
        {
            let mut from = here.clone();
            from.extend(scope.iter().cloned());
            let from = from.join("::");
            let target = match segs[0].as_str() {
                "crate" => walk(&mods, &[], &segs[1..]),
                "super" | "self" => {
                    // Inside an inline module, `super` first climbs out of it.
                    let mut at: Vec<String> = here.clone();
                    at.extend(scope.iter().cloned());
                    let mut rest = &segs[..];
                    while rest.first().is_some_and(|s| s == "super" || s == "self") {
                        if rest[0] == "super" {
                            at.pop();
                        }
                        rest = &rest[1..];
                    }
                    if in_use || segs[0] != "super" || at.is_empty() {
                        walk(&mods, &at, rest)
                    } else {
                        // Inline, `super::x::f()` in m/y.rs is counted as naming m's item x:
                        // an import of m, whatever x is (as the stop hook counts it); a
                        // `use super::x::f` line names module x. The root is left out: the
                        // hook never counted a top-level file's `super::x` as one.
                        at.join("::")
                    }
                }
                first => {
                    // A child module named from its parent.
                    let mut child = here.clone();
                    child.push(first.to_owned());
                    if scope.is_empty() && mods.contains(&child.join("::")) {
                        walk(&mods, &here, &segs)
                    } else {
                        continue;
                    }
                }
            };
            if target != from {
                edges.entry(from).or_default().insert(target);
            }
        }
    }
    Graph {
        edges,
        files: by_module,
    }
}

/// Each loop of the graph: a strongly connected set of two or more modules (Tarjan).
pub fn loops(g: &Graph) -> Vec<Vec<Module>> {
    struct State<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        let g = s.g;
        for w in g.edges.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(lw));
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low[v];
                s.low.insert(v, lv.min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.edges.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}
