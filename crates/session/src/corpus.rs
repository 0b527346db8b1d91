//! Prompt text, tokenized once per run through the server's own tokenizer.

use std::path::{Path, PathBuf};

use rand::{RngExt, SeedableRng};

use ctxbench_client::Backend;
use ctxbench_schema::error::ClientError;

pub mod code;
pub mod default;
pub mod natural;

/// The synthetic sentence of `--corpus repeat`. Repetitive text makes drafts trivially right: it inflates
/// speculative acceptance, so results always record which corpus was used.
pub const REPEAT_SENTENCE: &str = "The quick brown fox jumps over the lazy dog. ";

/// Characters whose token ids make up the nonce pool, beside the corpus's own ids.
const NONCE_ALPHABET: &str =
    "0 1 2 3 4 5 6 7 8 9 a b c d e f g h i j k l m n o p q r s t u v w x y z A B C D E F G H I J K L M N O P Q R S T U V W X Y Z";

/// Largest text sent to `/tokenize` in one request.
const TOKENIZE_CHUNK_CHARS: usize = 256 * 1024;

pub use ctxbench_schema::record::CorpusSpec;

/// Parses `--corpus`: `repeat`, `random`, `natural` or `code` (found on this machine), or a
/// path.
pub fn parse_spec(s: &str) -> Result<CorpusSpec, String> {
    match s {
        "repeat" => Ok(CorpusSpec::Repeat),
        "random" => Ok(CorpusSpec::Random),
        "natural" => natural::resolve().map(CorpusSpec::Natural),
        "code" => code::resolve().map(CorpusSpec::Code),
        p => {
            let path = PathBuf::from(p);
            if path.exists() {
                Ok(CorpusSpec::Path(path))
            } else {
                Err(format!(
                    "--corpus '{p}': not 'repeat', 'random', 'natural', 'code', or an existing file or folder"
                ))
            }
        }
    }
}

/// A tokenized corpus: prompts are windows of `tokens`, wrapping around when needed.
#[derive(Debug, Clone)]
pub struct Corpus {
    /// Token ids, in order.
    pub tokens: Vec<u32>,
    /// Ids to draw nonces from: distinct, and all known to the tokenizer.
    pub nonce_pool: Vec<u32>,
    /// How many server tokenize requests were made.
    pub tokenize_requests: usize,
    /// Whether prompts longer than the corpus wrap around (stated in results).
    pub wraps: bool,
    /// Bytes of text tokenized and their FNV-1a 64 hash (text corpora only).
    pub text: Option<(u64, String)>,
}

/// Corpus loading failures.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// The server failed to tokenize.
    #[error(transparent)]
    Tokenize(#[from] ClientError),
    /// Unreadable corpus files.
    #[error("cannot read corpus {path}: {detail}")]
    Read {
        /// The file or folder.
        path: String,
        /// What went wrong, as the transport or parser reported it.
        detail: String,
    },
    /// Nothing usable.
    #[error("{0}")]
    Empty(String),
}

impl Corpus {
    /// Tokenizes the corpus once; `needed` is the longest prompt the plan will ask for.
    pub async fn load(
        spec: &CorpusSpec,
        backend: &dyn Backend,
        needed: usize,
        n_vocab: Option<u64>,
        seed: u64,
    ) -> Result<Corpus, CorpusError> {
        let mut requests = 0;
        let alphabet = backend.tokenize(NONCE_ALPHABET).await?;
        requests += 1;
        if alphabet.is_empty() {
            // A /tokenize that ignores our request body: usually the wrong --backend.
            return Err(CorpusError::Empty(format!(
                "the server's tokenizer returned no tokens for non-empty text; check that --backend {} matches this server (or use --backend auto)",
                backend.kind().as_str()
            )));
        }
        let mut text = None;
        let (tokens, wraps) = match spec {
            CorpusSpec::Repeat => {
                // One block, tokenized once, repeated: the text is periodic anyway.
                let block = REPEAT_SENTENCE.repeat(256);
                let t = backend.tokenize(&block).await?;
                requests += 1;
                (t, true)
            }
            CorpusSpec::Random => match n_vocab {
                Some(v) => (random_tokens(v, needed.max(4096), seed), false),
                // SGLang and vLLM do not report their vocabulary size: draw from the ids
                // their own tokenizer produced for a probe text (every one a valid id).
                None => {
                    let ids = learn_ids(backend).await?;
                    requests += 1;
                    if ids.len() < 64 {
                        return Err(CorpusError::Empty(format!(
                            "--corpus random: the server does not report its vocabulary size, and its tokenizer gave only {} distinct ids for a probe text; use --corpus repeat or a text folder",
                            ids.len()
                        )));
                    }
                    (random_from(&ids, needed.max(4096), seed), false)
                }
            },
            CorpusSpec::Path(_) | CorpusSpec::Natural(_) | CorpusSpec::Code(_) => {
                let t = load_text(spec, backend, needed).await?;
                requests += t.requests;
                text = Some((t.bytes, format!("fnv1a64:{:016x}", t.hash)));
                let wraps = t.tokens.len() < needed;
                (t.tokens, wraps)
            }
        };
        if tokens.is_empty() {
            return Err(CorpusError::Empty(
                "the corpus tokenized to zero tokens: is the text empty?".to_owned(),
            ));
        }
        let mut pool: Vec<u32> = alphabet;
        pool.extend(tokens.iter().take(65536).copied());
        pool.sort_unstable();
        pool.dedup();
        Ok(Corpus {
            tokens,
            nonce_pool: pool,
            tokenize_requests: requests,
            wraps,
            text,
        })
    }

    /// Adds every ordinary id of a `n_vocab` vocabulary to the nonce pool (token-id prompts
    /// only: text backends can only render ids they have seen tokenized).
    pub fn widen_nonce_pool(&mut self, n_vocab: u64) {
        let (lo, hi) = ordinary_id_range(n_vocab);
        self.nonce_pool.extend((lo..hi).map(|i| i as u32));
        self.nonce_pool.sort_unstable();
        self.nonce_pool.dedup();
    }

    /// `len` tokens starting at `offset`, wrapping around the end.
    pub fn window(&self, offset: usize, len: usize) -> impl Iterator<Item = u32> + '_ {
        let n = self.tokens.len();
        (0..len).map(move |i| self.tokens[(offset + i) % n])
    }
}

/// A text corpus, tokenized: its tokens, the requests made, and the bytes tokenized with their
/// running FNV-1a 64 hash.
struct Tokenized {
    tokens: Vec<u32>,
    requests: usize,
    bytes: u64,
    hash: u64,
}

/// The texts of a text corpus in order: a path's files, natural's prose, code's source files
/// (read one at a time: only as many as the longest prompt needs).
fn corpus_texts(spec: &CorpusSpec) -> Result<Box<dyn Iterator<Item = String>>, CorpusError> {
    Ok(match spec {
        CorpusSpec::Code(root) => {
            let root = root.clone();
            let files = code::files(&root);
            if files.is_empty() {
                return Err(empty_corpus(&root));
            }
            // Files joined into pieces of about one tokenize request each: a few requests
            // for a long prompt instead of one per file.
            let mut entries = files
                .into_iter()
                .filter_map(move |f| code::entry(&root, &f))
                .peekable();
            Box::new(std::iter::from_fn(move || {
                let mut piece = entries.next()?;
                while piece.len() < TOKENIZE_CHUNK_CHARS {
                    match entries.next_if(|e| piece.len() + e.len() <= TOKENIZE_CHUNK_CHARS) {
                        Some(e) => piece.push_str(&e),
                        None => break,
                    }
                }
                Some(piece)
            }))
        }
        CorpusSpec::Path(p) | CorpusSpec::Natural(p) => {
            let mut texts = read_texts(p)?;
            if matches!(spec, CorpusSpec::Natural(_)) && natural::is_python(p) {
                // Python's documentation is a module of strings: the prose only.
                texts = texts.iter().map(|t| natural::python_strings(t)).collect();
            }
            Box::new(texts.into_iter())
        }
        CorpusSpec::Repeat | CorpusSpec::Random => Box::new(std::iter::empty()),
    })
}

/// Tokenizes a text corpus until `needed` tokens and at least one request's worth of text (so
/// the windows of short prompts spread over more than the longest prompt's text), or until
/// the text ends.
async fn load_text(
    spec: &CorpusSpec,
    backend: &dyn Backend,
    needed: usize,
) -> Result<Tokenized, CorpusError> {
    let mut t = Tokenized {
        tokens: Vec::new(),
        requests: 0,
        bytes: 0,
        hash: ctxbench_schema::fingerprint::fnv1a64(std::iter::empty()),
    };
    'outer: for text in corpus_texts(spec)? {
        for piece in split_text(&text, TOKENIZE_CHUNK_CHARS) {
            t.tokens.extend(backend.tokenize(piece).await?);
            t.requests += 1;
            t.bytes += piece.len() as u64;
            t.hash = ctxbench_schema::fingerprint::fnv1a64_from(t.hash, piece.bytes());
            if t.tokens.len() >= needed && t.bytes >= TOKENIZE_CHUNK_CHARS as u64 / 2 {
                break 'outer;
            }
        }
    }
    Ok(t)
}

/// A text whose tokenization touches many distinct ids of any tokenizer: every one-, two-
/// and three-letter lowercase word, capitalised two-letter words and numbers (about 80 kB,
/// one `/tokenize` request).
pub fn vocab_probe_text() -> String {
    let letters: Vec<char> = ('a'..='z').collect();
    let mut t = String::with_capacity(90_000);
    for a in &letters {
        t.push(' ');
        t.push(*a);
        for b in &letters {
            t.push(' ');
            t.push(*a);
            t.push(*b);
            t.push(' ');
            t.push(a.to_ascii_uppercase());
            t.push(*b);
            for c in &letters {
                t.push(' ');
                t.push(*a);
                t.push(*b);
                t.push(*c);
            }
        }
    }
    for n in 0..1000 {
        t.push_str(&format!(" {n}"));
    }
    t
}

/// The distinct ids the server's tokenizer produces for [`vocab_probe_text`]: a pool of
/// valid ordinary ids where the server does not report its vocabulary size.
pub async fn learn_ids(backend: &dyn Backend) -> Result<Vec<u32>, CorpusError> {
    let mut ids = backend.tokenize(&vocab_probe_text()).await?;
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// `len` ids drawn at random (seeded) from `pool`.
pub fn random_from(pool: &[u32], len: usize, seed: u64) -> Vec<u32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len)
        .map(|_| pool[rng.random_range(0..pool.len())])
        .collect()
}

/// Adds ids to the nonce pool (token-id prompts only).
impl Corpus {
    /// Widens the nonce pool with `ids` (from [`learn_ids`]).
    pub fn add_nonce_ids(&mut self, ids: &[u32]) {
        self.nonce_pool.extend_from_slice(ids);
        self.nonce_pool.sort_unstable();
        self.nonce_pool.dedup();
    }
}

/// Ids away from the ends of the vocabulary, where tokenizers keep special, control and
/// byte tokens (llama SPM: 0–258; Llama-3: the top 256).
pub fn ordinary_id_range(n_vocab: u64) -> (u64, u64) {
    if n_vocab > 2048 {
        (259, n_vocab - 256)
    } else {
        (0, n_vocab)
    }
}

/// Random ordinary ids (see [`ordinary_id_range`]).
pub fn random_tokens(n_vocab: u64, len: usize, seed: u64) -> Vec<u32> {
    let (lo, hi) = ordinary_id_range(n_vocab);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..len)
        .map(|_| rng.random_range(lo..hi.max(lo + 1)) as u32)
        .collect()
}

/// Checks, before anything is sent, that `--corpus PATH` holds text: stops at the first
/// non-empty UTF-8 file (in the order [`Corpus::load`] reads them), so a large folder is
/// not read twice.
pub fn check_path(path: &Path) -> Result<(), CorpusError> {
    for f in sorted_files(path)? {
        let bytes = std::fs::read(&f).map_err(|e| read_err(&f, e))?;
        if std::str::from_utf8(&bytes).is_ok_and(|s| !s.trim().is_empty()) {
            return Ok(());
        }
    }
    Err(empty_corpus(path))
}

fn read_err(p: &Path, e: std::io::Error) -> CorpusError {
    CorpusError::Read {
        path: p.display().to_string(),
        detail: e.to_string(),
    }
}

/// The file, or every regular file below the folder, in name order.
fn sorted_files(path: &Path) -> Result<Vec<std::path::PathBuf>, CorpusError> {
    let mut files = Vec::new();
    collect_files(path, &mut files).map_err(|e| read_err(path, e))?;
    files.sort();
    Ok(files)
}

fn empty_corpus(path: &Path) -> CorpusError {
    CorpusError::Empty(format!(
        "--corpus {}: no non-empty UTF-8 text files found; give a text file or a folder of them, or --corpus repeat|random",
        path.display()
    ))
}

/// Reads a file, or every regular file of a folder in name order (recursively), as UTF-8.
fn read_texts(path: &Path) -> Result<Vec<String>, CorpusError> {
    let mut out = Vec::new();
    for f in sorted_files(path)? {
        let bytes = std::fs::read(&f).map_err(|e| read_err(&f, e))?;
        // Binary files are skipped rather than fed to the tokenizer as mojibake.
        if let Ok(s) = String::from_utf8(bytes) {
            if !s.trim().is_empty() {
                out.push(s);
            }
        }
    }
    if out.is_empty() {
        return Err(empty_corpus(path));
    }
    Ok(out)
}

fn collect_files(p: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if p.is_dir() {
        for e in std::fs::read_dir(p)? {
            let e = e?;
            let name = e.file_name();
            if name.to_string_lossy().starts_with('.') {
                continue;
            }
            collect_files(&e.path(), out)?;
        }
    } else {
        out.push(p.to_path_buf());
    }
    Ok(())
}

/// Splits text into pieces of at most `max` bytes, at whitespace where possible, never
/// inside a UTF-8 character.
pub fn split_text(text: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while rest.len() > max {
        let mut cut = max;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        if let Some(ws) = rest[..cut].rfind(char::is_whitespace) {
            if ws > 0 {
                cut = ws;
            }
        }
        out.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_wraps() {
        let c = Corpus {
            tokens: vec![1, 2, 3],
            nonce_pool: vec![],
            tokenize_requests: 0,
            wraps: true,
            text: None,
        };
        assert_eq!(c.window(2, 5).collect::<Vec<_>>(), vec![3, 1, 2, 3, 1]);
    }

    #[test]
    fn random_tokens_avoid_special_ranges_and_are_seeded() {
        let a = random_tokens(32000, 10_000, 7);
        assert!(a.iter().all(|&t| (259..31744).contains(&t)));
        assert_eq!(a, random_tokens(32000, 10_000, 7));
        assert_ne!(a, random_tokens(32000, 10_000, 8));
    }

    #[test]
    fn split_text_respects_limits_and_chars() {
        let s = "ééé ééé ééé";
        let parts = split_text(s, 7);
        assert!(parts.iter().all(|p| p.len() <= 7));
        assert_eq!(parts.concat(), s);
    }

    #[test]
    fn corpus_spec_parse() {
        assert_eq!(parse_spec("repeat").unwrap(), CorpusSpec::Repeat);
        assert!(parse_spec("/definitely/not/here").is_err());
    }
}
