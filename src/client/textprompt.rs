//! Exact-length text prompts for servers that take no token ids (TGI): token ids → text
//! through pieces learned from the server's own `/tokenize` offsets, then re-tokenize, cut at
//! a token boundary and re-check, because pieces joined back can merge into fewer tokens.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

use crate::error::ClientError;

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
}
