//! Text prompts of known length for servers that take no token ids.
//!
//! - Exact (TGI): token ids → text through pieces learned from the server's own `/tokenize`
//!   offsets, then re-tokenize, cut at a token boundary and re-check, because pieces joined
//!   back can merge into fewer tokens.
//! - Calibrated ([`CalibratedText`]: Ollama, and OpenAI-compatible servers with no tokenizer
//!   endpoint): the corpus is cut into whitespace-led "units" (client-side ids, *not* model
//!   tokens); for each new target length, up to [`CALIBRATION_ROUNDS`] requests that
//!   generate one token ask the server how many tokens it counts for so many units, before
//!   t0 of the measured request and with the nonce reversed, so no calibration prompt
//!   shares a prefix with a measured one. A unit can be worth several tokens, so the result
//!   is within a tolerance ([`CALIBRATED_TOLERANCE`]), not exact.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use ctxbench_schema::error::ClientError;

/// One token of a tokenize answer: id and its character span in the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Token id.
    pub id: u32,
    /// First character (not byte) of the token in the input.
    pub start: usize,
    /// One past its last character.
    pub stop: usize,
}

/// The text of each token id, learned from tokenize answers. A token's piece includes the
/// gap before it (from the previous token's end), so contiguous ids join back into the text.
#[derive(Debug, Default)]
pub struct Pieces {
    map: Mutex<HashMap<u32, String>>,
}

/// Attempts at trimming before giving up.
const ROUNDS: usize = 4;

impl Pieces {
    /// Learns the pieces of `text` from its tokenization (the first sighting of an id wins).
    pub fn learn(&self, text: &str, spans: &[Span]) {
        let chars: Vec<char> = text.chars().collect();
        let Ok(mut map) = self.map.lock() else {
            return;
        };
        let mut prev = 0;
        for s in spans {
            let (a, b) = (prev.min(chars.len()), s.stop.min(chars.len()));
            if a < b {
                map.entry(s.id)
                    .or_insert_with(|| chars[a..b].iter().collect());
            }
            prev = prev.max(s.stop);
        }
    }

    /// The text of `ids`, or the first id never seen.
    pub fn text(&self, ids: &[u32]) -> Result<String, u32> {
        let map = self
            .map
            .lock()
            .map_err(|_| ids.first().copied().unwrap_or(0))?;
        let mut out = String::new();
        for id in ids {
            out.push_str(map.get(id).ok_or(*id)?);
        }
        Ok(out)
    }
}

/// Builds text that the server's tokenizer counts as exactly `ids.len()` tokens: joins the
/// pieces, pads with the prompt's own body when joining merged tokens away, cuts at the
/// boundary of the last wanted token and re-checks. Returns the text.
pub async fn exact_text<F, Fut>(
    endpoint: &str,
    pieces: &Pieces,
    ids: &[u32],
    skip: usize,
    tokenize: F,
) -> Result<String, ClientError>
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<Vec<Span>, ClientError>>,
{
    let target = ids.len();
    let unknown = |id| ClientError::Malformed {
        endpoint: endpoint.to_owned(),
        detail: format!(
            "token id {id} was never seen in a /tokenize answer, so its text is unknown"
        ),
    };
    let mut text = pieces.text(ids).map_err(unknown)?;
    // Padding: the prompt's body again (after the nonce), enough to cover merges.
    let body = &ids[skip.min(ids.len())..];
    let pad = pieces.text(&body[..body.len().min(256)]).map_err(unknown)?;
    for _ in 0..ROUNDS {
        let spans = tokenize(text.clone()).await?;
        if spans.len() == target {
            return Ok(text);
        }
        if spans.len() < target {
            if pad.is_empty() {
                break;
            }
            text.push_str(&pad);
            continue;
        }
        let cut = spans[target - 1].stop;
        text = text.chars().take(cut).collect();
    }
    Err(ClientError::Malformed {
        endpoint: endpoint.to_owned(),
        detail: format!(
            "could not build a text prompt of exactly {target} tokens (the tokenizer merges across the cut); try another --corpus"
        ),
    })
}

/// Calibration requests allowed per target length.
pub const CALIBRATION_ROUNDS: usize = 5;

/// The relative length tolerance of calibrated prompts: a unit can be worth several tokens,
/// so the closest the calibration gets may be a few tokens off the target.
pub const CALIBRATED_TOLERANCE: f64 = 0.01;

/// The most units a calibration text of `target` tokens may have: a whitespace-led unit is at
/// least one token in any tokenizer but a rare merge, so four per target token (and a margin
/// for short targets) bounds the text, and with it memory, whatever a server counts.
pub fn max_units(target: usize) -> usize {
    target.saturating_mul(4).max(target.saturating_add(64))
}

/// The error of a server that counted no token at all for a calibration text: lengths
/// cannot be calibrated against it.
fn counts_nothing(units: usize) -> ClientError {
    ClientError::Unsupported {
        what: "a prompt length on this server".to_owned(),
        hint: format!(
            "it counted 0 prompt tokens for a calibration text of {units} words (usage of all zeros: it counts nothing), so no length can be calibrated against it; --tokenizer-url URL lends the tokenizer of a server of the same model, or measure a server that counts its tokens"
        ),
    }
}

/// Leading units reversed in a calibration prompt, at least.
const REVERSED: usize = 8;

#[derive(Debug, Default)]
struct UnitTable {
    text: Vec<String>,
    ids: HashMap<String, u32>,
}

#[derive(Debug, Default)]
struct Calibration {
    /// Tokens per unit, last observed.
    ratio: Option<f64>,
    /// Per target: the units the server counted closest to it, and its count of them.
    units_for: HashMap<usize, (usize, usize)>,
}

/// A prompt text built by [`CalibratedText::prompt`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalibratedPrompt {
    /// The text to send.
    pub text: String,
    /// The server's count for the calibration text of the same units (nonce reversed).
    pub counted: usize,
    /// Calibration requests sent for this prompt (0: its length was calibrated before).
    pub requests: usize,
}

/// Text prompts whose length is calibrated against the server's own prompt count (see the
/// module doc). Shared by every backend whose server counts tokens but has no tokenizer;
/// the backend supplies the request that asks for the count.
#[derive(Debug)]
pub struct CalibratedText {
    nonce_tokens: usize,
    units: Mutex<UnitTable>,
    calib: Mutex<Calibration>,
    requests: AtomicUsize,
}

fn poisoned() -> ClientError {
    ClientError::Malformed {
        endpoint: "units".to_owned(),
        detail: "poisoned".to_owned(),
    }
}

impl CalibratedText {
    /// Prompts that start with `nonce_tokens` units of nonce (never used as padding).
    pub fn new(nonce_tokens: usize) -> Self {
        CalibratedText {
            nonce_tokens,
            units: Mutex::new(UnitTable::default()),
            calib: Mutex::new(Calibration::default()),
            requests: AtomicUsize::new(0),
        }
    }

    /// Calibration requests sent so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }

    /// Cuts text into whitespace-led units with client-side ids (the backend's `tokenize`).
    pub fn units(&self, text: &str) -> Result<Vec<u32>, ClientError> {
        let mut u = self.units.lock().map_err(|_| poisoned())?;
        let mut out = Vec::new();
        let mut cur = String::new();
        let mut in_word = false;
        let mut push = |w: &mut String, u: &mut UnitTable| {
            if w.is_empty() {
                return;
            }
            let id = match u.ids.get(w.as_str()) {
                Some(&id) => id,
                None => {
                    let id = u.text.len() as u32;
                    u.text.push(w.clone());
                    u.ids.insert(w.clone(), id);
                    id
                }
            };
            out.push(id);
            w.clear();
        };
        for c in text.chars() {
            if c.is_whitespace() && in_word {
                push(&mut cur, &mut u);
                in_word = false;
            }
            if !c.is_whitespace() {
                in_word = true;
            }
            cur.push(c);
        }
        push(&mut cur, &mut u);
        Ok(out)
    }

    /// The text of the units `ids`, as they are.
    pub fn text_of(&self, ids: &[u32]) -> String {
        self.text(ids, ids.len())
    }

    /// The text of `n` units of `ids`, wrapping over the body (after the nonce) if needed.
    fn text(&self, ids: &[u32], n: usize) -> String {
        let Ok(u) = self.units.lock() else {
            return String::new();
        };
        let skip = self.nonce_tokens.min(ids.len().saturating_sub(1));
        let body = &ids[skip..];
        (0..n)
            .map(|i| {
                let id = if i < ids.len() {
                    ids[i]
                } else {
                    body[(i - ids.len()) % body.len().max(1)]
                };
                u.text.get(id as usize).map_or("", String::as_str)
            })
            .collect()
    }

    /// The text of the prompt `ids` (units) with as many units as the server counts as
    /// `ids.len()` tokens. `count` sends a calibration text to the server (one generated
    /// token, not measured) and returns its prompt count. At most [`CALIBRATION_ROUNDS`]
    /// requests per new length; later prompts of a calibrated length send none.
    pub async fn prompt<F, Fut>(
        &self,
        ids: &[u32],
        count: F,
    ) -> Result<CalibratedPrompt, ClientError>
    where
        F: Fn(String) -> Fut,
        Fut: Future<Output = Result<usize, ClientError>>,
    {
        let target = ids.len();
        let (known, ratio) = match self.calib.lock() {
            Ok(c) => (c.units_for.get(&target).copied(), c.ratio),
            Err(_) => (None, None),
        };
        if let Some((units, counted)) = known {
            return Ok(CalibratedPrompt {
                text: self.text(ids, units),
                counted,
                requests: 0,
            });
        }
        // The calibration prompt must not share a prefix with the measured one: reverse
        // its nonce (same units, so the same count); with `--nonce off`, its first units,
        // so the calibration still does not warm the measured prompt.
        let mut probe_ids = ids.to_vec();
        let k = self.nonce_tokens.max(REVERSED).min(probe_ids.len());
        probe_ids[..k].reverse();
        if k > 1 && probe_ids[0] == ids[0] {
            probe_ids.swap(0, 1);
        }
        let mut units = ((target as f64) / ratio.unwrap_or(1.0).max(1e-3))
            .round()
            .clamp(1.0, max_units(target) as f64) as usize;
        // (distance from the target, units, count)
        let mut best = (usize::MAX, units, 0);
        // The most units counted short of the target and the fewest counted beyond it: the
        // answer lies between, and when no unit is left between them, neither side can get
        // closer (a unit worth several tokens), so calibration stops early.
        let (mut below, mut above) = (0usize, usize::MAX);
        let mut sent = 0;
        for _ in 0..CALIBRATION_ROUNDS {
            self.requests.fetch_add(1, Ordering::Relaxed);
            sent += 1;
            let text = self.text(&probe_ids, units);
            let counted = count(text).await?;
            if counted == 0 {
                // A server that counts nothing (usage of all zeros) would otherwise send
                // the step towards infinity: the prompt grows without bound.
                return Err(counts_nothing(units));
            }
            let r = counted as f64 / units as f64;
            if let Ok(mut c) = self.calib.lock() {
                c.ratio = Some(r);
            }
            let off = counted.abs_diff(target);
            if off < best.0 {
                best = (off, units, counted);
            }
            if off == 0 {
                break;
            }
            if counted < target {
                below = below.max(units);
            } else {
                above = above.min(units);
            }
            if above.saturating_sub(below) <= 1 {
                break;
            }
            let step = ((target as f64 - counted as f64) / r.max(1e-9)).round() as i64;
            let next = (units as i64).saturating_add(step).max(1) as usize;
            // Strictly inside the bracket, and never beyond what any tokenizer could count
            // as the target: memory stays bounded whatever the server answers.
            units = next
                .clamp(below + 1, above.saturating_sub(1).max(below + 1))
                .min(max_units(target));
        }
        if let Ok(mut c) = self.calib.lock() {
            c.units_for.insert(target, (best.1, best.2));
        }
        Ok(CalibratedPrompt {
            text: self.text(ids, best.1),
            counted: best.2,
            requests: sent,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A word tokenizer: runs of letters are one token, anything else one token per char.
    fn words(text: &str) -> Vec<Span> {
        let chars: Vec<char> = text.chars().collect();
        let mut out = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            let start = i;
            if chars[i].is_alphabetic() {
                while i < chars.len() && chars[i].is_alphabetic() {
                    i += 1;
                }
            } else {
                i += 1;
            }
            let w: String = chars[start..i].iter().collect();
            let id = w
                .bytes()
                .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32))
                % 30000;
            out.push(Span { id, start, stop: i });
        }
        out
    }

    #[test]
    fn joined_pieces_that_merge_are_padded_cut_and_rechecked() {
        let corpus = "alpha beta gamma, delta epsilon zeta eta theta iota kappa";
        let p = Pieces::default();
        let spans = words(corpus);
        p.learn(corpus, &spans);
        // "beta" then "alpha" without a gap between ("betaalpha"?) — pieces carry their
        // leading gap, so only a nonce of bare words can merge: ids of "alpha" and "gamma".
        let ids: Vec<u32> = vec![
            spans[0].id,
            spans[4].id,
            spans[2].id,
            spans[6].id,
            spans[8].id,
        ];
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let text = rt
            .block_on(exact_text(
                "/t",
                &p,
                &ids,
                1,
                |t| async move { Ok(words(&t)) },
            ))
            .unwrap();
        assert_eq!(words(&text).len(), ids.len(), "{text:?}");
        assert!(text.starts_with("alpha"), "{text:?}");
    }

    #[test]
    fn unknown_ids_are_named() {
        let p = Pieces::default();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let e = rt
            .block_on(exact_text(
                "/t",
                &p,
                &[42],
                0,
                |t| async move { Ok(words(&t)) },
            ))
            .unwrap_err();
        assert!(e.to_string().contains("42"), "{e}");
    }

    #[test]
    fn calibration_finds_the_units_a_server_counts_as_the_target_without_sharing_the_nonce() {
        // A server that counts 2 tokens per unit plus 3 (BOS and a template).
        let count = |t: String| async move { Ok(2 * t.split_whitespace().count() + 3) };
        let c = CalibratedText::new(4);
        let corpus: String = (0..400).map(|i| format!(" w{i}")).collect();
        let ids = c.units(&corpus).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let seen = std::cell::RefCell::new(Vec::new());
        let p = rt
            .block_on(c.prompt(&ids[..101], |t: String| {
                seen.borrow_mut().push(t.clone());
                count(t)
            }))
            .unwrap();
        // 101 is odd: 49 units = 101 exactly.
        assert_eq!(2 * p.text.split_whitespace().count() + 3, 101, "{}", p.text);
        assert_eq!(p.counted, 101);
        assert!(p.requests >= 2 && p.requests <= CALIBRATION_ROUNDS);
        assert_eq!(c.requests(), p.requests);
        for probe in seen.borrow().iter() {
            assert_ne!(
                probe.split_whitespace().next(),
                p.text.split_whitespace().next(),
                "a calibration prompt starts like the measured one"
            );
        }
        // The same length again: no request.
        let again = rt
            .block_on(c.prompt(&ids[1..102], |_| async { panic!("sent") }))
            .unwrap();
        assert_eq!((again.requests, again.counted), (0, 101));
        // An even target cannot be met exactly: the nearest count is kept (1 off).
        let even = rt.block_on(c.prompt(&ids[..100], count)).unwrap();
        assert_eq!(even.counted.abs_diff(100), 1);
        // Once no unit lies between a count short of the target and one beyond it,
        // calibration stops: no rounds spent oscillating.
        assert!(even.requests <= 3, "{} requests", even.requests);
    }

    #[test]
    fn a_server_that_counts_nothing_or_almost_nothing_never_grows_the_prompt_without_bound() {
        let c = CalibratedText::new(4);
        let corpus: String = (0..400).map(|i| format!(" w{i}")).collect();
        let ids = c.units(&corpus).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        // All-zero usage: refused at the first answer, with what would help.
        let e = rt
            .block_on(c.prompt(&ids[..300], |_| async { Ok(0) }))
            .unwrap_err();
        assert!(e.to_string().contains("counts nothing"), "{e}");
        assert!(e.to_string().contains("--tokenizer-url"), "{e}");
        assert_eq!(c.requests(), 1);
        // A count of 1 whatever the text: every calibration text stays within the bound.
        let longest = std::cell::Cell::new(0);
        let p = rt
            .block_on(c.prompt(&ids[..300], |t: String| {
                longest.set(longest.get().max(t.split_whitespace().count()));
                async { Ok(1) }
            }))
            .unwrap();
        assert!(longest.get() <= max_units(300), "{}", longest.get());
        assert!(p.text.split_whitespace().count() <= max_units(300));
    }
}
