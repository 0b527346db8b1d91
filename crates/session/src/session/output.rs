//! The results file of a session, opened before any request so an unwritable path costs
//! nothing, and the history of first tokens sent to a server.

use std::path::{Path, PathBuf};

use crate::bench::Observer;
use ctxbench_schema::error::{RecordError, UsageError};
use ctxbench_schema::record::{self, Line, ResultsWriter, ResumeRecord, RunHeader, Sample};

/// The results file, opened early so an unwritable path fails before any request.
pub struct Output {
    /// Where it is.
    pub path: PathBuf,
    /// The run id: new, or the resumed file's.
    pub run_id: String,
    resume: Option<record::Results>,
    fresh: Option<std::fs::File>,
}

impl Output {
    /// Creates `path` (a new run) or reads it (`resume`); an existing file without
    /// `resume` is refused, a missing one with it starts a new run (said once).
    pub fn open(
        path: &Path,
        resume: bool,
        observer: &mut dyn Observer,
    ) -> Result<Output, OutputError> {
        if !resume && path.exists() {
            return Err(UsageError::Invalid(format!(
                "results file {} exists: use --resume to continue it, or another --out",
                path.display()
            ))
            .into());
        }
        if resume && !path.exists() {
            // A script that always passes --resume works from its first run.
            observer.note(
                &format!(
                    "--resume: {} does not exist; nothing to resume, starting a new run",
                    path.display()
                ),
                true,
            );
        }
        if resume && path.exists() {
            let results = record::read_results(path, true)?;
            if results.torn_bytes > 0 {
                observer.note(
                    &format!(
                        "{} ended with a torn line ({} bytes, the writer was killed mid-line); it was discarded",
                        path.display(),
                        results.torn_bytes
                    ),
                    true,
                );
            }
            return Ok(Output {
                path: path.to_owned(),
                run_id: results.header.run_id.clone(),
                resume: Some(results),
                fresh: None,
            });
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| RecordError::Io {
                path: dir.display().to_string(),
                cause: e,
            })?;
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| OutputError::Create {
                exists: e.kind() == std::io::ErrorKind::AlreadyExists,
                source: RecordError::Io {
                    path: path.display().to_string(),
                    cause: e,
                },
            })?;
        Ok(Output {
            path: path.to_owned(),
            run_id: new_run_id(),
            resume: None,
            fresh: Some(file),
        })
    }

    /// The header of the file being resumed (`None` for a new run).
    pub fn prior_header(&self) -> Option<&RunHeader> {
        self.resume.as_ref().map(|r| &r.header)
    }

    /// Writes the header (new run) or checks it against the file's (resume); returns the
    /// writer and the samples already measured.
    pub fn start(
        &mut self,
        header: &RunHeader,
    ) -> Result<(ResultsWriter, Vec<Sample>), RecordError> {
        match &self.resume {
            Some(r) => {
                let diff = record::config_diff(
                    &record::identity(&r.header.config),
                    &record::identity(&header.config),
                );
                if !diff.is_empty() {
                    return Err(RecordError::ConfigMismatch {
                        path: self.path.display().to_string(),
                        diff: diff.join("\n"),
                    });
                }
                let prior = r.samples.clone();
                let mut w = ResultsWriter::append_to(&self.path)?;
                w.append(&Line::Resume(ResumeRecord {
                    run_id: self.run_id.clone(),
                    at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
                }))?;
                Ok((w, prior))
            }
            None => {
                self.fresh = None;
                std::fs::remove_file(&self.path).ok();
                let w = ResultsWriter::create(&self.path, header)?;
                Ok((w, Vec::new()))
            }
        }
    }

    /// Removes a results file this invocation created but never wrote to.
    pub fn discard_if_empty(&mut self) {
        if self.fresh.take().is_some() {
            let empty = std::fs::metadata(&self.path)
                .map(|m| m.len() == 0)
                .unwrap_or(false);
            if empty {
                std::fs::remove_file(&self.path).ok();
            }
        }
    }
}

/// Why the results file could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The options do not allow it (an existing file without `--resume`).
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// Reading or creating the file failed.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The file could not be created.
    #[error("cannot create the results file{}", if *.exists { " (use --resume to continue it, or another --out)" } else { "" })]
    Create {
        /// It appeared between the check and the creation.
        exists: bool,
        /// The I/O error.
        #[source]
        source: RecordError,
    },
}

/// A new run id: 12 characters of base 36.
pub fn new_run_id() -> String {
    use rand::RngExt;
    let mut rng = rand::rng();
    (0..12)
        .map(|_| char::from_digit(rng.random_range(0..36), 36).unwrap_or('0'))
        .collect()
}

/// The first tokens of the prompts earlier runs sent to one server (URL and model), kept
/// in `$XDG_STATE_HOME/ctxbench/nonce/` (else `~/.local/state/…`), oldest first, so that a
/// later run's nonces do not start like a prompt the server may still have cached. Best
/// effort: an unreadable or unwritable file only loses the history (verification remains).
pub struct NonceHistory {
    path: Option<PathBuf>,
}

impl NonceHistory {
    /// The history of the server at `url` serving `model`.
    pub fn open(url: &str, model: Option<&str>) -> NonceHistory {
        let dir = std::env::var_os("XDG_STATE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/state")));
        let key: String = format!("{url}-{}", model.unwrap_or(""))
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        NonceHistory {
            path: dir.map(|d| d.join("ctxbench/nonce").join(format!("{key}.txt"))),
        }
    }

    /// The first tokens recorded, oldest first.
    pub fn load(&self) -> Vec<u32> {
        let Some(p) = &self.path else {
            return Vec::new();
        };
        std::fs::read_to_string(p)
            .map(|t| {
                t.split_whitespace()
                    .filter_map(|w| w.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Appends this run's first tokens, keeping at most `cap` (the nonce pool's size).
    pub fn save(&self, used: impl Iterator<Item = u32>, cap: usize) {
        let Some(p) = &self.path else { return };
        let mut all = self.load();
        let known: std::collections::HashSet<u32> = all.iter().copied().collect();
        all.extend(used.filter(|t| !known.contains(t)));
        let start = all.len().saturating_sub(cap);
        let text: Vec<String> = all[start..].iter().map(u32::to_string).collect();
        let _ = p
            .parent()
            .map(std::fs::create_dir_all)
            .transpose()
            .and_then(|_| std::fs::write(p, text.join("\n") + "\n"));
    }
}
