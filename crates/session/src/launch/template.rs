//! Server command templates and their variants (`--server-cmd` with `-L NAME VALUES`). Pure.
//!
//! A template is one command line with placeholders: `{port}` (always required: ctxbench picks
//! the port) and `{NAME}` for each parameter list. Like hyperfine's `-L/--parameter-list`,
//! a list's values are separated by commas (`\,` is a literal comma) and several lists make a
//! grid of variants in hyperfine's order: the first list changes fastest.
//!
//! Unlike hyperfine, no shell runs the command: the template is split into words once with
//! POSIX shell quoting rules (the `shell-words` crate) and the placeholders are replaced inside
//! each word, so a value with a space stays one argument and nothing is ever re-interpreted
//! by a shell. Only `{identifier}` is a placeholder; other braces (a JSON argument such as
//! `'{"a":1}'`) are left alone.
//!
//! A *flag list* (`-F NAME VALUES`) is the one exception, for variants that differ by whole
//! flags (speculation on or off: `-F spec ',-md draft.gguf --spec-type draft-simple'`): its
//! placeholder must stand as a word of its own, each value is split into words with the same
//! quoting rules, and an empty value adds no words at all.

use std::collections::BTreeSet;

/// The placeholder ctxbench fills with the free port it chose.
pub const PORT: &str = "port";

/// A bad template or parameter list; every message says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The template has no words.
    #[error("the server command is empty")]
    Empty,
    /// Unbalanced quotes or a trailing backslash.
    #[error("cannot split the server command into words ({detail}); check its quotes")]
    Split {
        /// What the splitter reported.
        detail: String,
    },
    /// `{port}` is missing, so ctxbench could not tell the server where to listen.
    #[error(
        "the server command has no {{port}} placeholder: ctxbench chooses a free port and must pass it (e.g. --port {{port}})"
    )]
    MissingPort,
    /// A `{name}` in the template with no `-L name ...` list.
    #[error("the server command uses {{{name}}} but no parameter list defines it (add -L {name} VALUES, or use one of: {known})")]
    UnknownPlaceholder {
        /// The placeholder's name.
        name: String,
        /// The names that are defined, comma-separated (or "port" alone).
        known: String,
    },
    /// A parameter list whose `{name}` never appears in the template.
    #[error("parameter list '{name}' is not used: the server command has no {{{name}}}")]
    UnusedList {
        /// The list's name.
        name: String,
    },
    /// A flag list's placeholder inside a longer word, where its words cannot go.
    #[error("flag list '{name}' must stand as a word of its own in the server command (`... {{{name}}} ...`, not `-x{{{name}}}`): its values are whole flags")]
    FlagListInsideWord {
        /// The list's name.
        name: String,
    },
    /// A flag list's value that cannot be split into words.
    #[error("flag list '{name}': cannot split '{value}' into words ({detail}); check its quotes")]
    FlagValueSplit {
        /// The list's name.
        name: String,
        /// The value.
        value: String,
        /// What the splitter reported.
        detail: String,
    },
    /// The same list name twice.
    #[error("parameter list '{name}' is given twice; give each name once with all its values")]
    DuplicateList {
        /// The list's name.
        name: String,
    },
    /// A list named `port`.
    #[error("'port' is reserved: ctxbench fills {{port}} itself; name the list differently")]
    ReservedName,
    /// A list name that could not appear as a placeholder.
    #[error(
        "parameter list name '{name}' must be letters, digits or '_', not starting with a digit"
    )]
    BadName {
        /// The offending name.
        name: String,
    },
    /// A list with no values, or an empty value in it.
    #[error("parameter list '{name}' has an empty value; give comma-separated values, e.g. -L {name} 1,2")]
    EmptyValue {
        /// The list's name.
        name: String,
    },
    /// `--spec-flags` that cannot be split into words.
    #[error("--spec-flags: cannot split '{value}' into words ({detail}); check its quotes")]
    SpecFlagsSplit {
        /// The flags as given.
        value: String,
        /// What the splitter reported.
        detail: String,
    },
    /// `--spec-flags` must name the draft length K as exactly one `-L` list's placeholder.
    #[error("--spec-flags must hold exactly one placeholder of a -L list, the draft length K (e.g. --spec-flags '-md draft.gguf --spec-draft-n-max {{k}}' -L k 0,2,4); it holds {found}")]
    SpecFlagsPlaceholder {
        /// What it holds instead, in words.
        found: String,
    },
    /// A value of the K list that is not a whole number.
    #[error("-L {name}: '{value}' is not a draft length; K is a whole number of tokens (0 = the server without speculation)")]
    SpecKNotNumber {
        /// The list's name.
        name: String,
        /// The value.
        value: String,
    },
    /// The same value twice in one list: two variants would have the same label.
    #[error("parameter list '{name}' repeats the value '{value}'; to compare a command with itself, run more runs of one variant")]
    DuplicateValue {
        /// The list's name.
        name: String,
        /// The repeated value.
        value: String,
    },
}

impl From<TemplateError> for ctxbench_schema::error::UsageError {
    fn from(e: TemplateError) -> Self {
        ctxbench_schema::error::UsageError::Invalid(e.to_string())
    }
}

/// One `-L NAME VALUES` list (or `-F NAME VALUES`: a flag list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParameterList {
    /// The placeholder name, without braces.
    pub name: String,
    /// Its values, in order.
    pub values: Vec<String>,
    /// A flag list: each value is split into words (none for an empty value).
    pub flags: bool,
}

impl ParameterList {
    /// Parses `-L NAME VALUES`: values split on `,`, with `\,` a literal comma and `\\` a
    /// backslash (hyperfine's rules).
    pub fn parse(name: &str, values: &str) -> Result<ParameterList, TemplateError> {
        Self::parse_as(name, values, false)
    }

    /// Parses `-F NAME VALUES`: like [`ParameterList::parse`], but each value is a group of
    /// flags split into words, and an empty value (`,-md d.gguf`: the first one) means none.
    pub fn parse_flags(name: &str, values: &str) -> Result<ParameterList, TemplateError> {
        Self::parse_as(name, values, true)
    }

    fn parse_as(name: &str, values: &str, flags: bool) -> Result<ParameterList, TemplateError> {
        let mut out = Vec::new();
        let mut cur = String::new();
        let mut chars = values.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some(e @ (',' | '\\')) => cur.push(e),
                    Some(o) => {
                        cur.push('\\');
                        cur.push(o);
                    }
                    None => cur.push('\\'),
                },
                ',' => out.push(std::mem::take(&mut cur)),
                _ => cur.push(c),
            }
        }
        out.push(cur);
        let list = ParameterList {
            name: name.to_owned(),
            values: out,
            flags,
        };
        list.validate()?;
        Ok(list)
    }

    fn validate(&self) -> Result<(), TemplateError> {
        let name = &self.name;
        if name == PORT {
            return Err(TemplateError::ReservedName);
        }
        if !is_identifier(name) {
            return Err(TemplateError::BadName { name: name.clone() });
        }
        // An empty flag group is the variant without those flags.
        if self.values.is_empty() || (!self.flags && self.values.iter().any(|v| v.is_empty())) {
            return Err(TemplateError::EmptyValue { name: name.clone() });
        }
        if self.flags {
            for v in &self.values {
                shell_words::split(v).map_err(|e| TemplateError::FlagValueSplit {
                    name: name.clone(),
                    value: v.clone(),
                    detail: e.to_string(),
                })?;
            }
        }
        let mut seen = BTreeSet::new();
        for v in &self.values {
            if !seen.insert(v) {
                return Err(TemplateError::DuplicateValue {
                    name: name.clone(),
                    value: v.clone(),
                });
            }
        }
        Ok(())
    }
}

fn is_identifier(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// Placeholder names in `word`, in order: every `{identifier}`.
fn placeholders(word: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = word;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) if is_identifier(&after[..close]) => {
                out.push(&after[..close]);
                rest = &after[close + 1..];
            }
            _ => rest = after,
        }
    }
    out
}

/// Replaces `{name}` in `word` for each (name, value).
fn substitute(word: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(word.len());
    let mut rest = word;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let hit = after.find('}').and_then(|close| {
            let name = &after[..close];
            values
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (close, *v))
        });
        match hit {
            Some((close, v)) => {
                out.push_str(v);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Flags whose value is a secret (`--api-key K`, `--api-key=K`, `--hf-token K`, ...).
fn is_secret_flag(flag: &str) -> bool {
    let f = flag
        .trim_start_matches('-')
        .to_ascii_lowercase()
        .replace('_', "-");
    ["api-key", "token", "secret", "password", "passwd"]
        .iter()
        .any(|k| f.ends_with(k))
}

/// The words with the value of every secret-looking flag replaced by `***`, so an API key
/// given to the server never reaches a results file, label or log.
pub fn redact(words: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(words.len());
    let mut hide_next = false;
    for w in words {
        if hide_next {
            out.push("***".to_owned());
            hide_next = false;
            continue;
        }
        match w.split_once('=') {
            Some((flag, _)) if flag.starts_with('-') && is_secret_flag(flag) => {
                out.push(format!("{flag}=***"));
            }
            _ => {
                hide_next = w.starts_with('-') && is_secret_flag(w);
                out.push(w.clone());
            }
        }
    }
    out
}

/// A validated server command template with its parameter lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerTemplate {
    raw: String,
    words: Vec<String>,
    lists: Vec<ParameterList>,
    spec: Option<SpecFlags>,
}

/// `--spec-flags`: speculation's flags, added to every variant whose K (the value of
/// `list`) is above 0; K = 0 is the server without them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SpecFlags {
    /// The `-L` list that is the draft length K.
    list: String,
    /// The flags, split into words, `{list}` still open.
    words: Vec<String>,
}

impl ServerTemplate {
    /// Splits and validates `template` against `lists` (in the order given on the command
    /// line). Every placeholder must be `{port}` or a list's name, every list must be used.
    pub fn new(template: &str, lists: Vec<ParameterList>) -> Result<ServerTemplate, TemplateError> {
        Self::with_spec_flags(template, lists, None)
    }

    /// Like [`ServerTemplate::new`], with `--spec-flags`: words appended to the command of
    /// every variant whose draft length K is above 0. They must hold exactly one `{NAME}` of
    /// a `-L` list (K, whole numbers); K = 0 is the server without them.
    pub fn with_spec_flags(
        template: &str,
        lists: Vec<ParameterList>,
        spec_flags: Option<&str>,
    ) -> Result<ServerTemplate, TemplateError> {
        let spec = spec_flags.map(|f| spec_of(f, &lists)).transpose()?;
        let words = shell_words::split(template).map_err(|e| TemplateError::Split {
            detail: e.to_string(),
        })?;
        if words.is_empty() {
            return Err(TemplateError::Empty);
        }
        let mut names = BTreeSet::new();
        for l in &lists {
            l.validate()?;
            if !names.insert(l.name.as_str()) {
                return Err(TemplateError::DuplicateList {
                    name: l.name.clone(),
                });
            }
        }
        let mut used: BTreeSet<&str> = words.iter().flat_map(|w| placeholders(w)).collect();
        if let Some(s) = &spec {
            used.insert(s.list.as_str());
        }
        for u in &used {
            if *u != PORT && !names.contains(u) {
                let known = std::iter::once(PORT)
                    .chain(lists.iter().map(|l| l.name.as_str()))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(TemplateError::UnknownPlaceholder {
                    name: (*u).to_owned(),
                    known,
                });
            }
        }
        if !used.contains(PORT) {
            return Err(TemplateError::MissingPort);
        }
        if let Some(l) = lists.iter().find(|l| !used.contains(l.name.as_str())) {
            return Err(TemplateError::UnusedList {
                name: l.name.clone(),
            });
        }
        for l in lists.iter().filter(|l| l.flags) {
            let whole = format!("{{{}}}", l.name);
            let inside = words
                .iter()
                .any(|w| *w != whole && placeholders(w).contains(&l.name.as_str()));
            if inside {
                return Err(TemplateError::FlagListInsideWord {
                    name: l.name.clone(),
                });
            }
        }
        Ok(ServerTemplate {
            raw: template.to_owned(),
            words,
            lists,
            spec,
        })
    }

    /// The template as the user wrote it.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The parameter lists, in command-line order.
    pub fn lists(&self) -> &[ParameterList] {
        &self.lists
    }

    /// Every variant: the cartesian product of the lists, the first list changing fastest
    /// (hyperfine's order). One variant when there are no lists.
    pub fn variants(&self) -> Vec<Variant> {
        let total: usize = self.lists.iter().map(|l| l.values.len()).product();
        (0..total)
            .map(|index| {
                let mut rest = index;
                let params: Vec<(String, String)> = self
                    .lists
                    .iter()
                    .map(|l| {
                        let v = &l.values[rest % l.values.len()];
                        rest /= l.values.len();
                        (l.name.clone(), v.clone())
                    })
                    .collect();
                let pairs: Vec<(&str, &str)> = params
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_str()))
                    .collect();
                let mut words: Vec<String> = self
                    .words
                    .iter()
                    .flat_map(|w| self.expand(w, &pairs))
                    .collect();
                let spec_k = self.spec.as_ref().and_then(|s| {
                    let k = pairs.iter().find(|(n, _)| *n == s.list)?.1.parse().ok()?;
                    if k > 0 {
                        words.extend(s.words.iter().map(|w| substitute(w, &pairs)));
                    }
                    Some(k)
                });
                Variant {
                    index,
                    params,
                    words,
                    spec_k,
                }
            })
            .collect()
    }
}

impl ServerTemplate {
    /// One template word with the values filled in: a flag list's word becomes its value's
    /// words (none for an empty value), any other word one word.
    fn expand(&self, word: &str, pairs: &[(&str, &str)]) -> Vec<String> {
        let flag_list = self.lists.iter().find(|l| {
            l.flags
                && word.strip_prefix('{').and_then(|w| w.strip_suffix('}')) == Some(l.name.as_str())
        });
        match flag_list {
            Some(l) => {
                let value = pairs
                    .iter()
                    .find(|(n, _)| *n == l.name)
                    .map_or("", |(_, v)| *v);
                // Checked when the list was parsed.
                shell_words::split(value).unwrap_or_default()
            }
            None => vec![substitute(word, pairs)],
        }
    }
}

/// `--spec-flags` checked against the lists: split, one `{NAME}` of an `-L` list, whose
/// values are whole numbers.
fn spec_of(flags: &str, lists: &[ParameterList]) -> Result<SpecFlags, TemplateError> {
    let words = shell_words::split(flags).map_err(|e| TemplateError::SpecFlagsSplit {
        value: flags.to_owned(),
        detail: e.to_string(),
    })?;
    let names: BTreeSet<&str> = words.iter().flat_map(|w| placeholders(w)).collect();
    let known: Vec<&ParameterList> = lists
        .iter()
        .filter(|l| !l.flags && names.contains(l.name.as_str()))
        .collect();
    let list = match (known.as_slice(), names.len()) {
        ([l], 1) => *l,
        _ => {
            let found = if names.is_empty() {
                "none".to_owned()
            } else {
                names
                    .iter()
                    .map(|n| format!("{{{n}}}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(TemplateError::SpecFlagsPlaceholder { found });
        }
    };
    if let Some(v) = list.values.iter().find(|v| v.parse::<u32>().is_err()) {
        return Err(TemplateError::SpecKNotNumber {
            name: list.name.clone(),
            value: v.clone(),
        });
    }
    Ok(SpecFlags {
        list: list.name.clone(),
        words,
    })
}

/// One server command of the grid, with every parameter filled in and `{port}` still open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    /// Position in the grid (0 = the first, the default baseline).
    pub index: usize,
    /// (list name, value) for each list, in command-line order.
    pub params: Vec<(String, String)>,
    words: Vec<String>,
    /// With `--spec-flags`: this variant's draft length K (0: no speculation flags).
    pub spec_k: Option<u32>,
}

impl Variant {
    /// The argument vector with `{port}` set: program first. What is spawned.
    pub fn argv(&self, port: u16) -> Vec<String> {
        let p = port.to_string();
        self.words
            .iter()
            .map(|w| substitute(w, &[(PORT, &p)]))
            .collect()
    }

    /// The exact command line that runs (shell-quoted, so it can be pasted into a shell;
    /// secrets redacted, see [`redact`]); for the results header and the log.
    pub fn command_line(&self, port: u16) -> String {
        shell_words::join(redact(&self.argv(port)))
    }

    /// The variant's label: its command line with `{port}` left as is, so that every run of
    /// the variant (each on its own port) carries the same label. Secrets redacted.
    pub fn label(&self) -> String {
        shell_words::join(redact(&self.words))
    }

    /// A short name from the parameter values (`threads=2,batch=512`), or `default` when the
    /// template has no lists; for `--baseline NAME` and file names.
    pub fn short_name(&self) -> String {
        if self.params.is_empty() {
            return "default".to_owned();
        }
        self.params
            .iter()
            .map(|(n, v)| match v.as_str() {
                // An empty flag group: the variant without those flags.
                "" => format!("{n}=none"),
                v => format!("{n}={v}"),
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(name: &str, values: &str) -> ParameterList {
        ParameterList::parse(name, values).unwrap()
    }

    #[test]
    fn one_list_gives_one_variant_per_value_with_exact_argv() {
        let t = ServerTemplate::new(
            "llama-server -m 'my model.gguf' --port {port} -t {threads}",
            vec![list("threads", "1,2")],
        )
        .unwrap();
        let v = t.variants();
        assert_eq!(v.len(), 2);
        assert_eq!(
            v[1].argv(8123),
            [
                "llama-server",
                "-m",
                "my model.gguf",
                "--port",
                "8123",
                "-t",
                "2"
            ]
        );
        assert_eq!(
            v[0].command_line(9),
            "llama-server -m 'my model.gguf' --port 9 -t 1"
        );
        assert_eq!(
            v[0].label(),
            "llama-server -m 'my model.gguf' --port {port} -t 1"
        );
        assert_eq!(v[1].short_name(), "threads=2");
    }

    #[test]
    fn secrets_never_reach_the_command_line_or_label() {
        let t = ServerTemplate::new(
            "srv --port {port} --api-key s3cr3t --hf_token=abc --max-tokens 5",
            vec![],
        )
        .unwrap();
        let v = &t.variants()[0];
        assert_eq!(v.argv(1)[4], "s3cr3t");
        for shown in [v.command_line(1), v.label()] {
            assert!(
                !shown.contains("s3cr3t") && !shown.contains("abc"),
                "{shown}"
            );
            assert!(
                shown.contains("--api-key '***' '--hf_token=***' --max-tokens 5"),
                "{shown}"
            );
        }
    }

    #[test]
    fn grid_follows_hyperfine_order_first_list_fastest() {
        let t = ServerTemplate::new(
            "srv --port {port} -t {t} -b {b}",
            vec![list("t", "1,2"), list("b", "x,y,z")],
        )
        .unwrap();
        let names: Vec<String> = t.variants().iter().map(Variant::short_name).collect();
        assert_eq!(
            names,
            ["t=1,b=x", "t=2,b=x", "t=1,b=y", "t=2,b=y", "t=1,b=z", "t=2,b=z"]
        );
        let idx: Vec<usize> = t.variants().iter().map(|v| v.index).collect();
        assert_eq!(idx, [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn no_list_is_one_default_variant() {
        let t = ServerTemplate::new("srv --port={port}", vec![]).unwrap();
        let v = t.variants();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].short_name(), "default");
        assert_eq!(v[0].argv(80), ["srv", "--port=80"]);
    }

    #[test]
    fn values_with_spaces_stay_one_word_and_other_braces_are_literal() {
        let t = ServerTemplate::new(
            r#"srv --port {port} --kw '{"a":1}' --x pre{v}post"#,
            vec![list("v", r"a b,c\,d")],
        )
        .unwrap();
        let v = t.variants();
        assert_eq!(
            v[0].argv(1),
            [
                "srv",
                "--port",
                "1",
                "--kw",
                r#"{"a":1}"#,
                "--x",
                "prea bpost"
            ]
        );
        assert_eq!(v[1].argv(1)[6], "prec,dpost");
    }

    #[test]
    fn a_flag_list_adds_whole_flags_or_none() {
        let t = ServerTemplate::new(
            "srv -m t.gguf --port {port} {spec} -c 8",
            vec![
                ParameterList::parse_flags("spec", ",-md 'my d.gguf' --spec-type draft-simple")
                    .unwrap(),
            ],
        )
        .unwrap();
        let v = t.variants();
        assert_eq!(
            v[0].argv(1),
            ["srv", "-m", "t.gguf", "--port", "1", "-c", "8"]
        );
        assert_eq!(
            v[1].argv(1),
            [
                "srv",
                "-m",
                "t.gguf",
                "--port",
                "1",
                "-md",
                "my d.gguf",
                "--spec-type",
                "draft-simple",
                "-c",
                "8"
            ]
        );
        assert_eq!(v[0].short_name(), "spec=none");
        assert_eq!(
            v[1].label(),
            "srv -m t.gguf --port {port} -md 'my d.gguf' --spec-type draft-simple -c 8"
        );
        assert_eq!(
            ServerTemplate::new(
                "srv --port {port} -x{spec}",
                vec![ParameterList::parse_flags("spec", ",a").unwrap()]
            )
            .unwrap_err(),
            TemplateError::FlagListInsideWord {
                name: "spec".into()
            }
        );
        assert!(matches!(
            ParameterList::parse_flags("spec", ",-md 'open").unwrap_err(),
            TemplateError::FlagValueSplit { .. }
        ));
    }

    #[test]
    fn bad_templates_and_lists_are_typed_errors() {
        let e = |t: &str, l: Vec<ParameterList>| ServerTemplate::new(t, l).unwrap_err();
        assert_eq!(e("", vec![]), TemplateError::Empty);
        assert!(matches!(
            e("srv 'open", vec![]),
            TemplateError::Split { .. }
        ));
        assert_eq!(e("srv -t 1", vec![]), TemplateError::MissingPort);
        assert_eq!(
            e("srv --port {port} -t {threads}", vec![]),
            TemplateError::UnknownPlaceholder {
                name: "threads".into(),
                known: "port".into()
            }
        );
        assert_eq!(
            e("srv --port {port}", vec![list("threads", "1")]),
            TemplateError::UnusedList {
                name: "threads".into()
            }
        );
        assert_eq!(
            e(
                "srv --port {port} -t {t}",
                vec![list("t", "1"), list("t", "2")]
            ),
            TemplateError::DuplicateList { name: "t".into() }
        );
        assert_eq!(
            ParameterList::parse("port", "1").unwrap_err(),
            TemplateError::ReservedName
        );
        assert_eq!(
            ParameterList::parse("t", "").unwrap_err(),
            TemplateError::EmptyValue { name: "t".into() }
        );
        assert_eq!(
            ParameterList::parse("t", "1,,2").unwrap_err(),
            TemplateError::EmptyValue { name: "t".into() }
        );
        assert_eq!(
            ParameterList::parse("t", "1,1").unwrap_err(),
            TemplateError::DuplicateValue {
                name: "t".into(),
                value: "1".into()
            }
        );
        assert_eq!(
            ParameterList::parse("2t", "1").unwrap_err(),
            TemplateError::BadName { name: "2t".into() }
        );
        // Messages say what to do.
        let msg = e("srv -t {threads} --port {port}", vec![]).to_string();
        assert!(msg.contains("-L threads VALUES"), "{msg}");
    }

    #[test]
    fn spec_flags_are_added_where_k_is_above_0_and_k_0_is_the_plain_server() {
        let t = ServerTemplate::with_spec_flags(
            "srv -m w.gguf --port {port} -np {np}",
            vec![list("k", "0,4"), list("np", "1,2")],
            Some("-md 'd d.gguf' --spec-draft-n-max {k}"),
        )
        .unwrap();
        let v = t.variants();
        assert_eq!(v.len(), 4);
        assert_eq!(v[0].spec_k, Some(0));
        assert_eq!(
            v[0].argv(1),
            ["srv", "-m", "w.gguf", "--port", "1", "-np", "1"]
        );
        assert_eq!(v[1].spec_k, Some(4));
        assert_eq!(
            v[3].argv(1)[7..],
            ["-md", "d d.gguf", "--spec-draft-n-max", "4"]
        );
        assert_eq!(v[3].short_name(), "k=4,np=2");
        // Without --spec-flags nothing is known of K.
        let plain = ServerTemplate::new("srv --port {port} -t {k}", vec![list("k", "0,4")]);
        assert_eq!(plain.unwrap().variants()[1].spec_k, None);
        let err = |tpl: &str, lists: Vec<ParameterList>, f: &str| {
            ServerTemplate::with_spec_flags(tpl, lists, Some(f)).unwrap_err()
        };
        assert_eq!(
            err("srv --port {port}", vec![list("k", "0,x")], "--n {k}"),
            TemplateError::SpecKNotNumber {
                name: "k".into(),
                value: "x".into()
            }
        );
        assert!(matches!(
            err("srv --port {port}", vec![list("k", "0,4")], "-md d.gguf"),
            TemplateError::SpecFlagsPlaceholder { .. }
        ));
        assert!(matches!(
            err(
                "srv --port {port} {j}",
                vec![list("k", "0,4"), list("j", "1")],
                "--n {k} {j}"
            ),
            TemplateError::SpecFlagsPlaceholder { .. }
        ));
    }
}
