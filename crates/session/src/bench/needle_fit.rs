//! Fitting a needle prompt to its exact length where the backend sends text: the length fit
//! (cut or pad at the end) acts on the filler after the fact, never on the question or the
//! fact, and the result is verified before it is sent (the question's tokens whole at the
//! end, the fact once, at its depth).

use ctxbench_client::{Backend, GenRequest};

/// Rounds of fit → count before giving up.
const ROUNDS: usize = 4;

/// A needle prompt's parts, as placed in token ids (see [`crate::needle::place`]).
pub struct Parts<'a> {
    /// The text of the fact.
    pub fact_text: &'a str,
    /// The question's tokens (its text is [`crate::needle::QUESTION`]).
    pub question: &'a [u32],
    /// Index of the fact's first token in the placed ids.
    pub fact_at: usize,
    /// Tokens of the fact.
    pub fact_len: usize,
    /// Filler to pad with (the base prompt's body).
    pub filler: &'a [u32],
}

/// Fits `req` (the placed ids) for sending: where the backend prepares text, the text of
/// everything before the question is fitted so that it and the question's text count as
/// the prompt's length. Returns where the fact starts, in tokens, or why the prompt cannot
/// hold its structure (then it must not be sent as a test of the model).
pub async fn fit(
    backend: &dyn Backend,
    req: &mut GenRequest,
    parts: &Parts<'_>,
) -> Result<usize, String> {
    let n = req.prompt.len();
    let q = parts.question.len();
    let q_text = crate::needle::QUESTION;
    let mut main = req.prompt[..n.saturating_sub(q)].to_vec();
    let min_main = parts.fact_at + parts.fact_len;
    for round in 0..ROUNDS {
        let mut part = GenRequest {
            prompt: main.clone(),
            prepared: None,
            ..req.clone()
        };
        backend
            .prepare(&mut part)
            .await
            .map_err(|e| format!("the text of the prompt could not be built: {e}"))?;
        let Some(text) = part.prepared else {
            // Token ids, sent as placed: the question ends them and the fact is at its
            // index by construction.
            return Ok(parts.fact_at);
        };
        let full = format!("{text}{q_text}");
        let ids = backend
            .tokenize(&full)
            .await
            .map_err(|e| format!("the prompt could not be counted: {e}"))?;
        if ids.len() == n {
            let fact_at = verify(backend, &full, &ids, parts).await?;
            req.prepared = Some(full);
            return Ok(fact_at);
        }
        if ids.len() > n {
            let keep = main.len().saturating_sub(ids.len() - n);
            if keep < min_main {
                return Err(format!(
                    "the length fit would cut into the fact ({} tokens over)",
                    ids.len() - n
                ));
            }
            main.truncate(keep);
        } else {
            let need = n - ids.len();
            let start = round * 97 % parts.filler.len().max(1);
            main.extend(parts.filler.iter().cycle().skip(start).take(need));
        }
    }
    Err(format!(
        "no text of the filler, fact and question counts as exactly {n} tokens in {ROUNDS} rounds"
    ))
}

/// Checks the fitted text: the question's tokens whole at the end, the fact once, at its
/// depth (within 1% of the prompt and 2 tokens). Returns the fact's token index.
async fn verify(
    backend: &dyn Backend,
    full: &str,
    ids: &[u32],
    parts: &Parts<'_>,
) -> Result<usize, String> {
    let n = ids.len();
    let q = parts.question;
    if n < q.len() || ids[n - q.len()..] != *q {
        return Err("the question's tokens are not whole at the end of the prompt".to_owned());
    }
    let fact = parts.fact_text.trim();
    let mut found = full.match_indices(fact);
    let (Some((at, _)), None) = (found.next(), found.next()) else {
        return Err("the fact is not in the prompt exactly once".to_owned());
    };
    let before = backend
        .tokenize(&full[..at])
        .await
        .map_err(|e| format!("the prompt could not be counted: {e}"))?
        .len();
    let slack = 2 + n / 100;
    if before.abs_diff(parts.fact_at) > slack {
        return Err(format!(
            "the fact sits at token {before}, not at its depth's token {} (± {slack})",
            parts.fact_at
        ));
    }
    Ok(before)
}
