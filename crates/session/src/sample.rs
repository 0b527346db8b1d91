//! Turning request outcomes into [`Sample`] records: the measurement arithmetic (TTFT,
//! decode rate over first→last token, two-point differences, speculative statistics) and
//! the flags that keep a wrong number out of summaries. Pure: no I/O.

use std::time::Duration;

use ctxbench_client::metrics;
use ctxbench_client::{GenOutcome, OnceOutcome};
use ctxbench_schema::error::ClientError;
use ctxbench_schema::record::steps_along::StepsAlong;
use ctxbench_schema::record::{Check, Contradiction, Impossible};
use ctxbench_schema::record::{
    ErrorKind, Flag, Method, Phase, Sample, SampleError, Status, TwoPoint,
};
use ctxbench_schema::record::{ServerTimings, SpecStats};

/// What a sample is measured against: the run it belongs to, the allowed prompt-length
/// difference at its context, and the output length asked for.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// Run id stamped on the sample.
    pub run_id: &'a str,
    /// Allowed |server prompt tokens − context| at this context.
    pub tolerance: u64,
    /// Tokens asked for per request (fewer is flagged `short_output`).
    pub output_tokens: u32,
    /// Where the nonce ends in what the server sees (see [`Sample::nonce_end`]).
    pub nonce_end: Option<u64>,
}

/// Whether `cached` tokens served from a cache reach past the nonce: reuse of only the
/// start every prompt shares (BOS, a chat template's prefix, part of the nonce) leaves the
/// rest of the prompt prefilled, so it is no contamination.
fn reused_past_nonce(cached: u64, nonce_end: Option<u64>) -> bool {
    cached > nonce_end.unwrap_or(0)
}

/// Sets the cold verdict of a sample from its cached count.
fn judge_cache(s: &mut Sample) {
    s.cache_verified = s.cached_tokens.is_some();
    s.contaminated = s
        .cached_tokens
        .is_some_and(|c| reused_past_nonce(c, s.nonce_end));
}

/// Flags shared by every method.
fn flag_common(s: &mut Sample, expected_output: u64) {
    if s.contaminated {
        s.flags.push(Flag::Contaminated);
    } else if s.cached_tokens.is_some_and(|c| c > 0) {
        s.flags.push(Flag::CachedBeforeNonceEnd);
    }
    if !s.cache_verified {
        s.flags.push(Flag::CacheUnverified);
    }
    if s.length_ok == Some(false) {
        s.flags.push(Flag::LengthMismatch);
    }
    if s.prompt_tokens.is_none() {
        s.flags.push(Flag::LengthUnreported);
    }
    if s.output_tokens.is_some_and(|n| n < expected_output) {
        s.flags.push(Flag::ShortOutput);
    }
    let why_none = [Flag::HeldBackStream, Flag::ImpossibleTiming];
    if s.ttft_ms.is_none() && !why_none.iter().any(|f| s.has(f)) {
        s.flags.push(Flag::NoTokens);
    }
}

/// A sample with nothing measured yet.
fn blank_sample(target: &Target<'_>, context: u64, rep: u32, sent: u64, at: String) -> Sample {
    Sample::blank(target.run_id, context, rep, sent, at, target.nonce_end)
}

fn fail(s: &mut Sample, e: &ClientError) {
    s.status = Status::Failed;
    s.error = Some(SampleError {
        kind: ErrorKind::from(e.kind()),
        message: e.to_string(),
    });
}

/// The two requests of one two-point sample: the output lengths asked for (A, B) and what
/// each request gave.
pub struct TwoPointPair {
    /// Output tokens asked of A and of B.
    pub tokens: (u32, u32),
    /// Request A's outcome.
    pub a: Result<OnceOutcome, ClientError>,
    /// Request B's outcome.
    pub b: Result<OnceOutcome, ClientError>,
}

/// Turns the two requests of the two-point method into one sample. Pure. Decode =
/// (n_B − n_A) / (t_B − t_A); when t_B ≤ t_A (a cache hit, or noise larger than the
/// decode time) no rate is computed and the sample says why.
pub fn make_two_point_sample(
    target: &Target<'_>,
    context: u64,
    rep: u32,
    sent: u64,
    at: String,
    pair: TwoPointPair,
) -> Sample {
    let TwoPointPair {
        tokens: (a_tokens, b_tokens),
        a,
        b,
    } = pair;
    let mut s = blank_sample(target, context, rep, sent, at);
    s.method = Method::TwoPoint;
    let (a, b) = match (a, b) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            fail(&mut s, &e);
            return s;
        }
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (t_a, t_b) = (ms(a.elapsed), ms(b.elapsed));
    let n_a = a.counts.completion_tokens.unwrap_or(a_tokens as u64);
    let n_b = b.counts.completion_tokens.unwrap_or(b_tokens as u64);
    s.prompt_tokens = b.counts.prompt_tokens;
    let len_ok = |p: Option<u64>| p.map(|p| p.abs_diff(context) <= target.tolerance);
    s.length_ok = match (len_ok(a.counts.prompt_tokens), len_ok(s.prompt_tokens)) {
        (Some(x), Some(y)) => Some(x && y),
        _ => None,
    };
    s.cached_tokens = match (a.counts.cached_tokens, b.counts.cached_tokens) {
        (Some(x), Some(y)) => Some(x.max(y)),
        _ => None,
    };
    judge_cache(&mut s);
    s.output_tokens = Some(n_b);
    s.finish_reason = b.finish_reason.clone();
    s.e2e_ms = Some(t_b);
    s.server = b.timings;
    // With one token, request A's time is the time to that token: a non-streamed TTFT.
    if n_a == 1 {
        s.ttft_ms = Some(t_a);
        if let Some(p) = s.prompt_tokens.filter(|_| t_a > 0.0) {
            s.prefill_tokens_per_s = Some(p as f64 / (t_a / 1000.0));
        }
    }
    let mut reason = None;
    if n_b <= n_a {
        reason = Some(format!(
            "B generated {n_b} tokens, A {n_a}: no difference to time"
        ));
    } else if t_b <= t_a {
        reason = Some(if s.contaminated {
            format!("t_B {t_b:.1} ms ≤ t_A {t_a:.1} ms: a request hit the prefix cache")
        } else {
            format!("t_B {t_b:.1} ms ≤ t_A {t_a:.1} ms: run-to-run noise exceeds the decode time of {} tokens; raise B", n_b - n_a)
        });
    } else {
        let dt = t_b - t_a;
        s.decode_tokens_per_s = Some((n_b - n_a) as f64 / (dt / 1000.0));
        s.ms_per_step = Some(dt / (n_b - n_a) as f64);
    }
    let a_busy = a.timings.as_ref().map(ServerTimings::busy_ms);
    s.two_point = Some(TwoPoint {
        a_tokens: n_a,
        b_tokens: n_b,
        t_a_ms: t_a,
        t_b_ms: t_b,
        reason: reason.clone(),
        a_server_busy_ms: a_busy,
    });
    if reason.is_some() {
        s.flags.push(Flag::TwoPointInverted);
    }
    if let Some(spec) = b.spec {
        set_spec(&mut s, spec);
    }
    flag_common(&mut s, b_tokens as u64);
    s
}

/// Turns a warm decode request (the prefix reused on purpose) into a sample: decode only;
/// a cache hit is the point here, not a contamination.
pub fn make_warm_sample(
    target: &Target<'_>,
    context: u64,
    rep: u32,
    sent: u64,
    at: String,
    result: Result<GenOutcome, ClientError>,
) -> Sample {
    let mut s = make_sample(target, context, rep, sent, at, result);
    s.phase = Phase::Warm;
    s.contaminated = false;
    s.prefill_tokens_per_s = None;
    s.flags
        .retain(|f| *f != Flag::Contaminated && *f != Flag::CachedBeforeNonceEnd);
    if let (Some(c), Some(p)) = (s.cached_tokens, s.prompt_tokens) {
        if c.saturating_mul(2) < p {
            s.flags.push(Flag::WarmPrefixNotReused);
        }
    }
    s
}

/// Turns a request's outcome into a sample. Pure: no I/O, unit-tested.
pub fn make_sample(
    target: &Target<'_>,
    context: u64,
    rep: u32,
    sent: u64,
    at: String,
    result: Result<GenOutcome, ClientError>,
) -> Sample {
    let mut s = blank_sample(target, context, rep, sent, at);
    let out = match result {
        Ok(o) => o,
        Err(e) => {
            fail(&mut s, &e);
            return s;
        }
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    s.prompt_tokens = out.counts.prompt_tokens;
    s.cached_tokens = out.counts.cached_tokens;
    s.cached_host_tokens = out.counts.cached_host_tokens;
    judge_cache(&mut s);
    s.length_ok = s
        .prompt_tokens
        .map(|p| p.abs_diff(context) <= target.tolerance);
    s.ttft_ms = out.stream.ttft().map(ms);
    s.e2e_ms = Some(ms(out.stream.e2e()));
    s.token_chunks = Some(out.stream.token_events as u64);
    s.output_tokens = out.counts.completion_tokens;
    s.finish_reason = out.finish_reason;
    s.server = out.timings;
    if let (Some(p), Some(t)) = (s.prompt_tokens, s.ttft_ms) {
        if t > 0.0 {
            s.prefill_tokens_per_s = Some(p as f64 / (t / 1000.0));
        }
    }
    // Decode: (n − 1) tokens over first→last token, n from the server's count, so a chunk
    // carrying several tokens (speculative decoding) is not mistaken for one step.
    if let (Some(n), Some(span)) = (s.output_tokens, out.stream.decode_span()) {
        let span_ms = ms(span);
        if held_back(&out.stream, span_ms, s.server.as_ref()) {
            // The first token came with the last: its arrival times the whole generation.
            s.flags.push(Flag::HeldBackStream);
            s.ttft_ms = None;
            s.prefill_tokens_per_s = None;
        } else if coalesced(&out.stream, span_ms, s.server.as_ref()) {
            s.flags.push(Flag::CoalescedTokens);
        } else if n >= 2 && span_ms > 0.0 {
            s.decode_tokens_per_s = Some((n - 1) as f64 / (span_ms / 1000.0));
            s.ms_per_step = Some(span_ms / (n - 1) as f64);
        }
    }
    // The server's own count of what it generated; a count made from the events themselves
    // cannot contradict them.
    let server_tokens = s.server.as_ref().and_then(|t| t.predicted_n).or(s
        .output_tokens
        .filter(|_| !out.flags.contains(&Flag::OutputTokensFromEvents)));
    if let Some(evidence) = impossible(&out.stream, s.server.as_ref(), server_tokens) {
        // No figure from timings that cannot be true; the evidence keeps the client's numbers.
        s.flags.push(Flag::ImpossibleTiming);
        s.impossible = Some(evidence);
        s.ttft_ms = None;
        s.prefill_tokens_per_s = None;
        s.decode_tokens_per_s = None;
        s.ms_per_step = None;
    }
    if disagrees(&s) {
        s.flags.push(Flag::ClientServerDisagree);
    }
    if let Some(spec) = out.spec {
        set_spec(&mut s, spec);
    }
    s.spec_steps_along = steps_along(&s, &out.stream);
    s.flags.extend(out.flags);
    if let Some((print, of, ids)) = ctxbench_schema::fingerprint::of(&out.output) {
        s.output_fingerprint = Some(print);
        s.fingerprint_of = Some(of);
        s.output_ids = ids;
    }
    flag_common(&mut s, target.output_tokens as u64);
    s
}

/// Speculative steps along the context, where the stream shows them: a speculative sample
/// whose events carry one token each (the server's count equals the events) and whose
/// decode timing stands.
fn steps_along(s: &Sample, st: &ctxbench_client::StreamStats) -> Option<StepsAlong> {
    let one_per_event =
        s.output_tokens == Some(st.token_events as u64) && st.token_times.len() == st.token_events;
    let timed = s.decode_tokens_per_s.is_some();
    let spec = s.spec_accept_length.is_some() || s.spec_draft_tokens.is_some_and(|d| d > 0);
    if !(one_per_event && timed && spec) {
        return None;
    }
    crate::steps_along::of(&st.token_times, s.prompt_tokens.unwrap_or(s.context_tokens))
}

/// Token-carrying events a stream needs before it can be judged held back: with fewer, a
/// burst cannot be told from a genuinely fast short output.
pub const HELD_BACK_MIN_EVENTS: usize = 4;

/// Whether the server (or a proxy) held the whole stream back and released it at the end:
/// at least [`HELD_BACK_MIN_EVENTS`] token-carrying events, and the first of them arrived
/// together with the last — every event in the read that brought the first, or all of them
/// within less than [`MIN_STEP_MS`] per event gap. No served model decodes one stream that
/// fast, so the first token's arrival is the end of the generation, not its start: neither
/// TTFT nor a decode rate can be read from it, only the end-to-end time. A genuinely fast
/// short output is not caught: fewer than four events are never judged, and four or more
/// events of a real decode are at least one step apart each. Tokens bunched only after
/// the first (a client descheduled mid-stream) are [`coalesced`], and keep their TTFT.
///
/// Where the server times its own decode, a decode it says took under
/// [`HELD_BACK_MIN_DECODE_MS`] is never judged: the tiny reference model on an idle host
/// generates four tokens in well under a millisecond, and they arrive together because they
/// were made together, not because anything held them back.
fn held_back(
    st: &ctxbench_client::StreamStats,
    span_ms: f64,
    server: Option<&ctxbench_client::ServerTimings>,
) -> bool {
    let n = st.token_events;
    let too_quick_to_tell = server
        .and_then(|t| t.predicted_ms)
        .is_some_and(|p| p < HELD_BACK_MIN_DECODE_MS);
    n >= HELD_BACK_MIN_EVENTS
        && !too_quick_to_tell
        && (st.first_read_token_events >= n || span_ms < MIN_STEP_MS * (n - 1) as f64)
}

/// A decode the server itself timed below this cannot be told from a held-back stream.
pub const HELD_BACK_MIN_DECODE_MS: f64 = 5.0;

/// Whether the tokens arrived in bursts, so first→last arrival does not time the decode:
/// three quarters or more of the stream came in the first token's read (a speculative step
/// can legitimately bring several), or the client saw the tokens
/// spread over less than half the time the server says it spent generating them.
fn coalesced(
    st: &ctxbench_client::StreamStats,
    span_ms: f64,
    server: Option<&ctxbench_client::ServerTimings>,
) -> bool {
    let burst = st.token_events >= 4 && st.first_read_token_events * 4 >= st.token_events * 3;
    // Buffered delivery the read count misses (recorded on a default vLLM 0.32.0: 32 events
    // within 0.12 ms, or 3.2 ms, each in its own read, after the whole generation): faster
    // than MIN_STEP_MS per event is no single-stream decode, it is a flush of buffered events.
    let instant =
        st.token_events >= 4 && span_ms < MIN_STEP_MS * (st.token_events.saturating_sub(1)) as f64;
    let squeezed = server
        .and_then(|t| t.predicted_ms)
        .is_some_and(|p| p > 1.0 && span_ms < 0.5 * p);
    burst || squeezed || instant
}

/// How far below the server's own time for the same request a client time may fall before
/// it is impossible, as a share of the server's time ([`IMPOSSIBLE_MARGIN_MS`] at least).
/// The client's clock starts before the request is written and stops when the token is
/// read, so a true client time is never below the server's at all (it adds the network and
/// any queue); the margin absorbs servers that stamp their own times a moment late (SGLang's
/// epoch-second stamps, taken in another process than the one that sends the token). A
/// stale event read as the first token misses by orders of magnitude (reported of a
/// llama.cpp-derived server: TTFT 5–76 ms against prompt_ms 5.4–47.6 s).
pub const IMPOSSIBLE_MARGIN_REL: f64 = 0.10;

/// The least margin of the `ttft` bound, in ms: a server's sub-millisecond prompt time is not
/// judged against a client's scheduling jitter.
pub const IMPOSSIBLE_MARGIN_MS: f64 = 5.0;

/// The least margin of the `decode` bound, in ms. A server may stamp the end of its decode
/// after the last token has left (llama-server times `predicted_ms` when it releases the
/// slot, after it queued the last token's event), so a server thread descheduled between
/// the two lengthens its own figure: on a shared host that is a scheduler's time slice or
/// a few, not the seconds an impossible stream is off by.
pub const IMPOSSIBLE_DECODE_MARGIN_MS: f64 = 50.0;

/// How far a client time may fall below the server's `server_ms` before it is impossible,
/// `floor_ms` at least.
fn impossible_margin(server_ms: f64, floor_ms: f64) -> f64 {
    (server_ms * IMPOSSIBLE_MARGIN_REL).max(floor_ms)
}

/// The bounds a streamed request's client timings break against the server's own numbers
/// for the same request, or `None` when they are possible:
/// - `ttft`: the first token arrived before the server finished the prompt (`prompt_ms`);
/// - `decode`: the last token arrived before the server finished the prompt and the decode
///   (`prompt_ms + predicted_ms`). A client decode span merely shorter than the server's is
///   a first token read late (its TTFT grew by as much): that is `coalesced_tokens` or
///   `client_server_disagree`; only a last token sooner than the server made it is
///   impossible;
/// - `tokens`: more token-carrying events than `server_tokens`, the tokens the server says
///   it generated (an event carries one token or more, never less).
///
/// Both times run from just before the request was written, so a true sample meets each
/// bound whatever the network, the queue or the client's scheduling did.
pub fn impossible(
    st: &ctxbench_client::StreamStats,
    server: Option<&ServerTimings>,
    server_tokens: Option<u64>,
) -> Option<Impossible> {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut checks = Vec::new();
    let mut bound = |check: Check, client: Option<f64>, server: Option<f64>, floor_ms: f64| {
        if let (Some(client), Some(server)) = (client, server) {
            let tolerance = impossible_margin(server, floor_ms);
            if client < server - tolerance {
                checks.push(Contradiction {
                    check,
                    client,
                    server,
                    tolerance,
                });
            }
        }
    };
    let prompt_ms = server.and_then(|t| t.prompt_ms);
    let busy_ms = server
        .and_then(|t| t.predicted_ms)
        .map(|p| p + prompt_ms.unwrap_or(0.0));
    // The server stamps the end of its prefill before the first token leaves: the TTFT
    // bound needs only the small margin.
    bound(
        Check::Ttft,
        st.ttft().map(ms),
        prompt_ms,
        IMPOSSIBLE_MARGIN_MS,
    );
    let to_last = st
        .t_last_token
        .map(|t| ms(t.saturating_duration_since(st.t_sent)));
    bound(Check::Decode, to_last, busy_ms, IMPOSSIBLE_DECODE_MARGIN_MS);
    if let Some(n) = server_tokens.filter(|n| st.token_events as u64 > *n) {
        checks.push(Contradiction {
            check: Check::Tokens,
            client: st.token_events as f64,
            server: n as f64,
            tolerance: 0.0,
        });
    }
    (!checks.is_empty()).then(|| Impossible {
        checks,
        first_event: st.first_token_event.clone(),
    })
}

/// How far the client's decode rate may stray from the server's own before the sample is
/// flagged `client_server_disagree`: 5%. Both time the same first→last-token span, so on an
/// idle machine they agree within about 1% (real SGLang 0.5.23: median ratio 0.998); a
/// token read late by the client (recorded against llama-server: +5.8%) is more.
pub const DISAGREE_MARGIN: f64 = 0.05;

pub use ctxbench_schema::record::decode_ratio;

fn disagrees(s: &Sample) -> bool {
    decode_ratio(s).is_some_and(|r| (r - 1.0).abs() > DISAGREE_MARGIN)
}

/// The shortest believable time between two streamed token events of one request, in ms
/// (5 000 events/s; a speculative step's several tokens are one event): no served model
/// decodes one stream that fast, so events closer than this on average were buffered and
/// flushed together (recorded on a default vLLM 0.32.0: 31 gaps of 0.004 ms and of 0.10 ms).
const MIN_STEP_MS: f64 = 0.2;

/// Stores speculative statistics on a sample (`Sample::set_spec`).
pub fn set_spec(s: &mut Sample, spec: SpecStats) {
    s.set_spec(spec);
}

/// Tokens the sample's requests generated after their first (the first comes from the
/// prefill, every later one from a decode step): n − 1, or (n_A − 1) + (n_B − 1) for the
/// two requests of a two-point sample, whose counter deltas cover both.
fn tokens_after_first(s: &Sample) -> Option<u64> {
    match &s.two_point {
        Some(tp) => Some(tp.a_tokens.saturating_sub(1) + tp.b_tokens.saturating_sub(1)),
        None => s.output_tokens.map(|n| n.saturating_sub(1)),
    }
}

/// Counter deltas count draft *proposals* (vLLM `spec_decode_num_drafts`): a decode step
/// for which the n-gram matcher found nothing is not counted, yet it is a step. Every step
/// yields its accepted drafts plus one token, so steps = tokens after the first − accepted,
/// and accept length = tokens after the first ÷ steps (recorded vLLM 0.32.0 n-gram:
/// 64 tokens, 13 drafts, 46 accepted → 17 steps, not 13).
pub fn count_every_step(mut spec: SpecStats, after_first: Option<u64>) -> SpecStats {
    if let (Some(t), Some(a)) = (after_first, spec.accepted_tokens) {
        if t > a {
            let steps = t - a;
            spec.verify_steps = Some(steps);
            spec.accept_length = Some(t as f64 / steps as f64);
            spec.source = format!(
                "{} (steps = tokens after the first − accepted)",
                spec.source
            );
        }
    }
    spec
}

/// Adds Prometheus deltas to a sample; speculative statistics come from them when the
/// response itself had none (read in the families' `/metrics` vocabularies).
pub fn apply_metric_deltas(s: &mut Sample, before: &metrics::Snapshot, after: &metrics::Snapshot) {
    let d = metrics::deltas(before, after, &ctxbench_client::kept_metric_names());
    // Counted verify steps beat derived ones (llama.cpp's timings have none; its newest
    // /metrics do).
    let derived = s
        .spec_source
        .as_deref()
        .is_some_and(|x| x.contains("derived"));
    if s.spec_source.is_none() || derived {
        let spec = ctxbench_client::metrics_vocabularies().find_map(|v| v.spec(&d));
        if let Some(spec) = spec.flatten() {
            // The counter counts the steps that verified a draft: kept as the server's own
            // number before the steps without a draft are added (llama.cpp drafts nothing when
            // one token is left to generate, so its last step is a plain decode).
            let drafted = spec.verify_steps;
            set_spec(s, count_every_step(spec, tokens_after_first(s)));
            s.spec_draft_steps = drafted;
        }
    }
    if s.phase == Phase::Cold && s.status == Status::Ok {
        apply_cache_evidence(s, &d);
    }
    if let Some((per_pos, drafts)) = metrics::accepted_per_position(&d) {
        (s.spec_accepted_per_position, s.spec_drafts) = (Some(per_pos), Some(drafts));
    }
    s.metrics = Some(d);
}

/// The server's own prefix-cache counters over one sample, as (tokens served from the
/// cache, tokens looked up), in the vocabulary of the family whose names the deltas carry
/// (whichever protocol is spoken to it). Other traffic on the server during the sample
/// counts too, so a hit here is at worst a false alarm, never a missed hit.
pub fn metrics_cache_evidence(d: &std::collections::BTreeMap<String, f64>) -> Option<(f64, f64)> {
    ctxbench_client::metrics_vocabularies().find_map(|v| v.cache_evidence(d))
}

/// Applies the server's prefix-cache counter deltas to a cold sample the response did not
/// prove cold: a hit that reaches past the nonce makes it contaminated; no hit while every
/// prompt token was looked up proves it cold (`cache_verified`).
pub fn apply_cache_evidence(s: &mut Sample, d: &std::collections::BTreeMap<String, f64>) {
    let Some((hits, queries)) = metrics_cache_evidence(d) else {
        return;
    };
    if hits > 0.0 {
        if s.cached_tokens.is_none_or(|c| c == 0) {
            s.cached_tokens = Some(hits as u64);
        }
        s.cache_verified = true;
        s.contaminated |= reused_past_nonce(hits as u64, s.nonce_end);
    } else if !s.cache_verified && s.prompt_tokens.is_some_and(|p| queries >= p as f64) {
        s.cached_tokens = Some(0);
        s.cache_verified = true;
    }
    s.flags.retain(|f| {
        *f != Flag::CacheUnverified && *f != Flag::Contaminated && *f != Flag::CachedBeforeNonceEnd
    });
    if s.contaminated {
        s.flags.insert(0, Flag::Contaminated);
    } else if s.cached_tokens.is_some_and(|c| c > 0) {
        s.flags.insert(0, Flag::CachedBeforeNonceEnd);
    }
    if !s.cache_verified {
        s.flags.push(Flag::CacheUnverified);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_client::{Counts, ServerTimings, StreamStats};
    use std::time::Instant;

    /// The target of unit-test samples: exact lengths, 33 output tokens.
    fn target() -> Target<'static> {
        Target {
            run_id: "r",
            tolerance: 0,
            output_tokens: 33,
            nonce_end: None,
        }
    }

    /// [`make_sample`] for [`target`]: rep 0, a prompt of exactly `context` tokens sent.
    fn target_sample(context: u64, result: Result<GenOutcome, ClientError>) -> Sample {
        make_sample(&target(), context, 0, context, "t".into(), result)
    }

    fn outcome(cached: Option<u64>, prompt: u64, n: u64, token_events: usize) -> GenOutcome {
        let t0 = Instant::now();
        GenOutcome {
            stream: StreamStats {
                t_sent: t0,
                t_first_byte: Some(t0 + Duration::from_millis(10)),
                t_first_token: Some(t0 + Duration::from_millis(100)),
                t_last_token: Some(t0 + Duration::from_millis(420)),
                t_end: t0 + Duration::from_millis(421),
                events: token_events + 3,
                token_events,
                first_read_token_events: 1,
                bytes: 1000,
                saw_final: true,
                token_times: Vec::new(),
                first_token_event: None,
            },
            counts: Counts {
                prompt_tokens: Some(prompt),
                completion_tokens: Some(n),
                cached_tokens: cached,
                cached_host_tokens: None,
            },
            timings: Some(ServerTimings {
                source: "t".into(),
                prompt_ms: Some(95.0),
                ..Default::default()
            }),
            finish_reason: Some("limit".into()),
            spec: None,
            flags: Vec::new(),
            output: Default::default(),
        }
    }

    #[test]
    fn cold_sample_metrics_use_server_count_over_first_to_last() {
        let s = target_sample(4096, Ok(outcome(Some(0), 4096, 33, 33)));
        assert_eq!(s.status, Status::Ok);
        assert!(s.usable() && s.cache_verified && !s.contaminated);
        assert!((s.ttft_ms.unwrap() - 100.0).abs() < 1e-6);
        // 32 intervals over 320 ms.
        assert!((s.decode_tokens_per_s.unwrap() - 100.0).abs() < 1e-6);
        assert!((s.ms_per_step.unwrap() - 10.0).abs() < 1e-6);
        assert!((s.prefill_tokens_per_s.unwrap() - 40960.0).abs() < 1e-6);
        assert!(s.flags.is_empty(), "{:?}", s.flags);
    }

    #[test]
    fn multi_token_chunks_do_not_change_the_per_token_rate() {
        // Speculative decoding: 33 tokens in 9 chunks, same interval: same tok/s.
        let s = target_sample(4096, Ok(outcome(Some(0), 4096, 33, 9)));
        assert!((s.decode_tokens_per_s.unwrap() - 100.0).abs() < 1e-6);
        assert_eq!(s.token_chunks, Some(9));
    }

    #[test]
    fn spec_stats_land_in_their_fields_and_per_step_time_is_per_verify_step() {
        // 33 tokens over 320 ms: 10 ms per token; 8 verify steps: 40 ms per step.
        let mut o = outcome(Some(0), 4096, 33, 9);
        o.spec = Some(
            SpecStats {
                source: "t".into(),
                verify_steps: Some(8),
                draft_tokens: Some(32),
                accepted_tokens: Some(24),
                accept_length: None,
                accept_rate: None,
            }
            .derive(),
        );
        let s = target_sample(4096, Ok(o));
        assert!((s.ms_per_step.unwrap() - 10.0).abs() < 1e-6);
        assert!((s.ms_per_verify_step.unwrap() - 40.0).abs() < 1e-6);
        assert_eq!(s.spec_accept_length, Some(4.0));
        assert_eq!(s.spec_accept_rate, Some(0.75));
        assert_eq!(s.spec_verify_steps, Some(8));
        assert_eq!(s.method, Method::Stream);
    }

    /// [`make_two_point_sample`] of 2048 tokens for [`target`]: A of 1 token, B of 17.
    fn two_point_2k(
        a: Result<OnceOutcome, ClientError>,
        b: Result<OnceOutcome, ClientError>,
    ) -> Sample {
        let pair = TwoPointPair {
            tokens: (1, 17),
            a,
            b,
        };
        make_two_point_sample(&target(), 2048, 0, 2048, "t".into(), pair)
    }

    fn once(ms: u64, n: u64, cached: u64) -> Result<OnceOutcome, ClientError> {
        Ok(OnceOutcome {
            elapsed: Duration::from_millis(ms),
            counts: Counts {
                prompt_tokens: Some(2048),
                completion_tokens: Some(n),
                cached_tokens: Some(cached),
                cached_host_tokens: None,
            },
            timings: None,
            spec: None,
            finish_reason: Some("length".into()),
        })
    }

    #[test]
    fn extreme_server_counts_never_overflow_or_give_nan() {
        let max = u64::MAX;
        let o = outcome(Some(max), max, max, 33);
        for s in [
            target_sample(4096, Ok(o.clone())),
            make_warm_sample(&target(), 4096, 0, 4096, "t".into(), Ok(o)),
            make_two_point_sample(
                &target(),
                4096,
                0,
                4096,
                "t".into(),
                TwoPointPair {
                    tokens: (1, 17),
                    a: once(10, max, max),
                    b: once(20, 0, max),
                },
            ),
        ] {
            for x in [
                s.ttft_ms,
                s.decode_tokens_per_s,
                s.ms_per_step,
                s.prefill_tokens_per_s,
            ]
            .into_iter()
            .flatten()
            {
                assert!(x.is_finite(), "{s:?}");
            }
            assert_eq!(
                s.length_ok,
                Some(false),
                "u64::MAX prompt tokens is not 4096"
            );
        }
    }

    #[test]
    fn two_point_decode_is_b_minus_a_over_time_difference() {
        let s = two_point_2k(once(100, 1, 0), once(260, 17, 0));
        assert_eq!(s.method, Method::TwoPoint);
        assert!((s.decode_tokens_per_s.unwrap() - 100.0).abs() < 1e-9);
        assert!((s.ms_per_step.unwrap() - 10.0).abs() < 1e-9);
        assert_eq!(s.ttft_ms, Some(100.0));
        assert_eq!(
            s.finish_reason.as_deref(),
            Some("length"),
            "B's, as the server said"
        );
        assert!(s.flags.is_empty(), "{:?}", s.flags);
    }

    #[test]
    fn two_point_inversion_is_flagged_with_its_reason_never_nan() {
        // The seed's trap: B served from the cache.
        let s = two_point_2k(once(100, 1, 0), once(20, 17, 2047));
        assert_eq!(s.decode_tokens_per_s, None);
        assert!(s.has(&Flag::TwoPointInverted));
        assert!(s.contaminated);
        let reason = s.two_point.as_ref().unwrap().reason.clone().unwrap();
        assert!(reason.contains("prefix cache"), "{reason}");
        // Without a cache hit the reason is noise.
        let s = two_point_2k(once(100, 1, 0), once(99, 17, 0));
        assert!(s.two_point.unwrap().reason.unwrap().contains("noise"));
        let e = ClientError::Transport {
            endpoint: "/c".into(),
            detail: "x".into(),
        };
        let s = two_point_2k(once(1, 1, 0), Err(e));
        assert_eq!(s.status, Status::Failed);
    }

    #[test]
    fn warm_samples_expect_the_cache_and_flag_when_it_was_not_used() {
        let s = make_warm_sample(
            &target(),
            4096,
            0,
            4096,
            "t".into(),
            Ok(outcome(Some(4095), 4096, 33, 33)),
        );
        assert_eq!(s.phase, Phase::Warm);
        assert!(!s.contaminated && s.flags.is_empty(), "{:?}", s.flags);
        let s = make_warm_sample(
            &target(),
            4096,
            0,
            4096,
            "t".into(),
            Ok(outcome(Some(0), 4096, 33, 33)),
        );
        assert!(s.has(&Flag::WarmPrefixNotReused));
    }

    #[test]
    fn a_burst_of_tokens_in_one_read_gives_no_decode_rate() {
        // The client was descheduled: 30 of 33 token events arrived with the first one.
        let mut o = outcome(Some(0), 4096, 33, 33);
        o.stream.first_read_token_events = 30;
        let s = target_sample(4096, Ok(o));
        assert!(s.decode_tokens_per_s.is_none() && s.ms_per_step.is_none());
        assert!(s.has(&Flag::CoalescedTokens));
        assert!(s.ttft_ms.is_some(), "TTFT is still measured");
    }

    #[test]
    fn a_client_span_far_below_the_servers_is_coalesced() {
        // Client saw 320 ms between first and last token; the server spent 1000 ms.
        let mut o = outcome(Some(0), 4096, 33, 33);
        o.timings.as_mut().unwrap().predicted_ms = Some(1000.0);
        let s = target_sample(4096, Ok(o));
        assert!(s.decode_tokens_per_s.is_none());
        assert!(s.has(&Flag::CoalescedTokens));
        // Agreeing spans keep their rate.
        let mut o = outcome(Some(0), 4096, 33, 33);
        o.timings.as_mut().unwrap().predicted_ms = Some(330.0);
        let s = target_sample(4096, Ok(o));
        assert!(s.decode_tokens_per_s.is_some());
    }

    /// A recorded real `/metrics` page (fixture body) and the same page with some counters
    /// lowered by the given amounts: the "before" of a sample.
    fn recorded_pair(file: &str, lower: &[(&str, f64)]) -> (metrics::Snapshot, metrics::Snapshot) {
        let fx: serde_json::Value = serde_json::from_str(file).unwrap();
        let after = metrics::parse(fx["response"]["body_text"].as_str().unwrap()).unwrap();
        let mut before = after.clone();
        for (name, by) in lower {
            let key = before
                .counters
                .keys()
                .find(|k| k.starts_with(&format!("{name}{{")))
                .cloned()
                .unwrap_or_else(|| panic!("{name} not in the recorded page"));
            *before.counters.get_mut(&key).unwrap() -= by;
        }
        (before, after)
    }

    const VLLM_METRICS: &str =
        include_str!("../../../tests/fixtures/recorded/vllm-0.32.0/metrics.json");
    const SGLANG_METRICS: &str =
        include_str!("../../../tests/fixtures/recorded/sglang-0.5.23/metrics.json");

    #[test]
    fn vllm_prefix_cache_hits_in_metrics_make_a_sample_contaminated() {
        // Default `vllm serve`: no cached count in usage; /metrics counted 1920 hit tokens.
        let mut s = target_sample(2048, Ok(outcome(None, 2048, 33, 33)));
        assert!(s.has(&Flag::CacheUnverified));
        let (b, a) = recorded_pair(
            VLLM_METRICS,
            &[
                ("vllm:prefix_cache_hits_total", 1920.0),
                ("vllm:prefix_cache_queries_total", 2048.0),
            ],
        );
        apply_metric_deltas(&mut s, &b, &a);
        assert!(s.contaminated && s.cache_verified && !s.usable());
        assert_eq!(s.cached_tokens, Some(1920));
        assert!(s.has(&Flag::Contaminated) && !s.has(&Flag::CacheUnverified));
    }

    #[test]
    fn no_hits_while_every_prompt_token_was_looked_up_proves_cold() {
        let mut s = target_sample(2048, Ok(outcome(None, 2048, 33, 33)));
        let (b, a) = recorded_pair(VLLM_METRICS, &[("vllm:prefix_cache_queries_total", 2048.0)]);
        apply_metric_deltas(&mut s, &b, &a);
        assert!(s.cache_verified && !s.contaminated && s.usable());
        assert_eq!(s.cached_tokens, Some(0));
        assert!(s.flags.is_empty(), "{:?}", s.flags);
        // Fewer tokens looked up than the prompt: nothing is proven.
        let mut s = target_sample(2048, Ok(outcome(None, 2048, 33, 33)));
        let (b, a) = recorded_pair(VLLM_METRICS, &[("vllm:prefix_cache_queries_total", 100.0)]);
        apply_metric_deltas(&mut s, &b, &a);
        assert!(!s.cache_verified && s.has(&Flag::CacheUnverified));
    }

    #[test]
    fn sglang_cached_tokens_counter_flags_a_hit_under_any_protocol() {
        // `--backend openai` on SGLang: usage without a cached count; /metrics had 1 hit.
        let mut s = target_sample(1024, Ok(outcome(None, 1024, 33, 33)));
        let (b, a) = recorded_pair(
            SGLANG_METRICS,
            &[
                ("sglang:cached_tokens_total", 1.0),
                ("sglang:prompt_tokens_total", 1024.0),
            ],
        );
        apply_metric_deltas(&mut s, &b, &a);
        assert!(s.contaminated && s.has(&Flag::Contaminated));
        assert_eq!(s.cached_tokens, Some(1));
    }

    #[test]
    fn sglang_without_any_hit_since_start_has_no_cached_series_and_is_cold() {
        let page = "# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total{engine_type=\"unified\",is_streaming=\"true\"} 100.0\n";
        let before = metrics::parse(page).unwrap();
        let after = metrics::parse(&page.replace("100.0", "1124.0")).unwrap();
        let mut s = target_sample(1024, Ok(outcome(None, 1024, 33, 33)));
        apply_metric_deltas(&mut s, &before, &after);
        assert!(s.cache_verified && !s.contaminated, "{:?}", s.flags);
    }

    #[test]
    fn verify_steps_count_steps_without_a_draft() {
        // Recorded vLLM 0.32.0 n-gram sample: 64 tokens, 13 drafts, 46 accepted.
        let spec = SpecStats {
            source: "vllm:spec_decode_* metric deltas".into(),
            verify_steps: Some(13),
            draft_tokens: Some(52),
            accepted_tokens: Some(46),
            accept_length: None,
            accept_rate: None,
        }
        .derive();
        let s = count_every_step(spec, Some(63));
        assert_eq!(s.verify_steps, Some(17));
        assert!((s.accept_length.unwrap() - 63.0 / 17.0).abs() < 1e-9);
        assert_eq!(s.accepted_tokens, Some(46));
    }

    #[test]
    fn the_servers_drafted_steps_are_kept_beside_every_step() {
        // Recorded llama-server DFlash sample (tiny target, random draft, n_max 8): 32 tokens,
        // 212 drafted, 0 accepted, 30 drafts: the 31st step, with one token left, drafts none.
        let page = |drafts: f64, drafted: f64| {
            metrics::parse(&format!(
                "llamacpp:spec_decode_num_draft_tokens_total {drafted}\n\
                 llamacpp:spec_decode_num_accepted_tokens_total 0\n\
                 llamacpp:spec_decode_num_drafts_total {drafts}\n"
            ))
            .unwrap()
        };
        let mut s = target_sample(1024, Ok(outcome(None, 1024, 32, 32)));
        apply_metric_deltas(&mut s, &page(0.0, 0.0), &page(30.0, 212.0));
        assert_eq!(s.spec_draft_tokens, Some(212));
        assert_eq!(s.spec_accepted_tokens, Some(0));
        assert_eq!(s.spec_draft_steps, Some(30));
        assert_eq!(s.spec_verify_steps, Some(31));
        assert_eq!(s.spec_accept_length, Some(1.0));
    }

    #[test]
    fn events_closer_than_any_decode_step_are_a_held_back_stream() {
        // Recorded on a default vLLM: 32 events within 0.12 ms, each in its own read, after
        // the whole generation: the first token's arrival is the end, not a TTFT.
        let mut o = outcome(None, 4096, 32, 32);
        let first = o.stream.t_first_token.unwrap();
        o.stream.t_last_token = Some(first + Duration::from_micros(120));
        o.timings = None;
        let s = target_sample(4096, Ok(o));
        assert!(s.has(&Flag::HeldBackStream), "{:?}", s.flags);
        assert!(s.ttft_ms.is_none() && s.prefill_tokens_per_s.is_none());
        assert!(s.decode_tokens_per_s.is_none() && s.ms_per_step.is_none());
        assert!(s.e2e_ms.is_some(), "the end-to-end time is kept");
        assert!(!s.has(&Flag::NoTokens) && !s.usable());
        // 32 events within 3.2 ms (9 661 tok/s, also recorded there): held back too.
        let mut o = outcome(None, 4096, 32, 32);
        o.stream.t_last_token = Some(first + Duration::from_micros(3200));
        o.timings = None;
        let s = target_sample(4096, Ok(o));
        assert!(s.has(&Flag::HeldBackStream));
        // Every event in the read that brought the first: held back, however spread the
        // arrival stamps.
        let mut o = outcome(None, 4096, 32, 32);
        o.stream.first_read_token_events = 32;
        let s = target_sample(4096, Ok(o));
        assert!(s.has(&Flag::HeldBackStream) && s.ttft_ms.is_none());
        // 32 events over 320 ms keep their TTFT and rate.
        let s = target_sample(4096, Ok(outcome(None, 4096, 32, 32)));
        assert!(!s.has(&Flag::HeldBackStream) && !s.has(&Flag::CoalescedTokens));
        assert!(s.ttft_ms.is_some() && s.decode_tokens_per_s.is_some());
    }

    #[test]
    fn a_genuinely_fast_short_output_is_not_held_back() {
        // Three events in one read (a fast server, or one speculative step after the
        // first): too few to tell a burst from a real decode.
        let mut o = outcome(None, 4096, 3, 3);
        o.stream.first_read_token_events = 3;
        let first = o.stream.t_first_token.unwrap();
        o.stream.t_last_token = Some(first + Duration::from_micros(50));
        o.timings = None;
        let s = target_sample(4096, Ok(o));
        assert!(!s.has(&Flag::HeldBackStream) && s.ttft_ms.is_some());
        // Four events a real 0.25 ms per step apart (4 000 tok/s): a decode, not a burst.
        let mut o = outcome(None, 4096, 4, 4);
        o.stream.first_read_token_events = 1;
        o.stream.t_last_token = Some(first + Duration::from_micros(750));
        o.timings = None;
        let s = target_sample(4096, Ok(o));
        assert!(!s.has(&Flag::HeldBackStream) && s.ttft_ms.is_some());
        // Four tokens the server says it made in 0.8 ms, all in one read: made together.
        let mut o = outcome(None, 4096, 4, 4);
        o.stream.first_read_token_events = 4;
        o.stream.t_last_token = Some(first + Duration::from_micros(20));
        if let Some(t) = o.timings.as_mut() {
            t.predicted_ms = Some(0.8);
        }
        let s = target_sample(4096, Ok(o));
        assert!(
            !s.has(&Flag::HeldBackStream) && s.ttft_ms.is_some(),
            "{s:?}"
        );
        // 30 of 33 events with the first (a client descheduled after it): coalesced only.
        let mut o = outcome(Some(0), 4096, 33, 33);
        o.stream.first_read_token_events = 30;
        let s = target_sample(4096, Ok(o));
        assert!(!s.has(&Flag::HeldBackStream) && s.has(&Flag::CoalescedTokens));
    }

    #[test]
    fn a_first_token_before_the_server_finished_the_prompt_is_impossible_and_gives_no_figure() {
        // As reported of a llama.cpp-derived server (issue 31): the stream starts with a
        // stale progress event at once, and the server says it read the prompt for 5.4 s.
        let mut o = outcome(Some(0), 4096, 33, 33);
        let t0 = o.stream.t_sent;
        o.stream.t_first_token = Some(t0 + Duration::from_millis(5));
        o.stream.t_last_token = Some(t0 + Duration::from_millis(5800));
        o.stream.first_token_event = Some(
            r#"{"content":"The","tokens_predicted":1,"prompt_progress":{"processed":0}}"#.into(),
        );
        if let Some(t) = o.timings.as_mut() {
            t.prompt_ms = Some(5453.7);
            t.predicted_ms = Some(320.0);
        }
        let s = target_sample(4096, Ok(o));
        assert!(s.has(&Flag::ImpossibleTiming), "{:?}", s.flags);
        assert!(!s.usable() && !s.clean());
        assert!(
            !s.has(&Flag::NoTokens),
            "tokens came; their times are what is wrong"
        );
        assert!(s.ttft_ms.is_none() && s.prefill_tokens_per_s.is_none());
        assert!(s.decode_tokens_per_s.is_none() && s.ms_per_step.is_none());
        let ev = s.impossible.as_ref().unwrap();
        let c = ev.get(&Check::Ttft).expect("the TTFT bound");
        assert!((c.client - 5.0).abs() < 1e-6 && c.server == 5453.7, "{c:?}");
        assert!((c.tolerance - 545.37).abs() < 1e-6);
        assert!(
            ev.get(&Check::Decode).is_none(),
            "the last token came after both"
        );
        assert!(ev
            .first_event
            .as_deref()
            .unwrap()
            .contains("prompt_progress"));
    }

    #[test]
    fn a_ttft_at_or_above_the_servers_prompt_time_less_the_margin_is_possible() {
        let with_prompt_ms = |p: f64| {
            let mut o = outcome(Some(0), 4096, 33, 33);
            o.timings.as_mut().unwrap().prompt_ms = Some(p);
            target_sample(4096, Ok(o))
        };
        // Client TTFT 100 ms. A server 8 ms slower (its stamps late): within 10%.
        let s = with_prompt_ms(108.0);
        assert!(!s.has(&Flag::ImpossibleTiming) && s.ttft_ms.is_some() && s.usable());
        // 12 ms slower than the client saw: beyond 10% of 112 ms.
        assert!(with_prompt_ms(112.0).has(&Flag::ImpossibleTiming));
        // A sub-millisecond prompt is judged against 5 ms at least.
        let mut o = outcome(Some(0), 4096, 33, 33);
        let t0 = o.stream.t_sent;
        o.stream.t_first_token = Some(t0 + Duration::from_micros(300));
        o.timings.as_mut().unwrap().prompt_ms = Some(4.0);
        assert!(!target_sample(4096, Ok(o)).has(&Flag::ImpossibleTiming));
    }

    #[test]
    fn a_last_token_before_the_server_finished_decoding_is_impossible() {
        // Client: first token at 100 ms, last at 420 ms. The server says 95 ms of prompt and
        // 1000 ms of decode: the client cannot have had all tokens 420 ms after sending.
        let mut o = outcome(Some(0), 4096, 33, 33);
        o.timings.as_mut().unwrap().predicted_ms = Some(1000.0);
        let s = target_sample(4096, Ok(o));
        assert!(s.has(&Flag::ImpossibleTiming), "{:?}", s.flags);
        let c = s
            .impossible
            .as_ref()
            .unwrap()
            .get(&Check::Decode)
            .unwrap()
            .clone();
        assert!(
            (c.client - 420.0).abs() < 1e-6 && c.server == 1095.0,
            "{c:?}"
        );
        assert!(s.ttft_ms.is_none() && s.decode_tokens_per_s.is_none());
        // 35 ms short of the server's 455 ms: within the decode bound's 50 ms (a server may
        // stamp its decode's end after the last token left).
        let mut o = outcome(Some(0), 4096, 33, 33);
        o.timings.as_mut().unwrap().predicted_ms = Some(360.0);
        assert!(!target_sample(4096, Ok(o)).has(&Flag::ImpossibleTiming));
        // A span shorter than the server's because the first token was read late: its TTFT
        // grew by as much, so it is possible (bursty, never impossible).
        let mut o = outcome(Some(0), 4096, 33, 33);
        let t0 = o.stream.t_sent;
        o.stream.t_first_token = Some(t0 + Duration::from_millis(800));
        o.stream.t_last_token = Some(t0 + Duration::from_millis(1100));
        o.timings.as_mut().unwrap().predicted_ms = Some(1000.0);
        let s = target_sample(4096, Ok(o));
        assert!(!s.has(&Flag::ImpossibleTiming), "{:?}", s.flags);
        assert!(s.has(&Flag::CoalescedTokens) && s.ttft_ms.is_some());
    }

    #[test]
    fn more_token_events_than_the_server_generated_tokens_is_impossible() {
        // 34 events carried a token; the server generated 33.
        let mut o = outcome(Some(0), 4096, 33, 34);
        o.timings.as_mut().unwrap().predicted_n = Some(33);
        let s = target_sample(4096, Ok(o));
        let c = s
            .impossible
            .as_ref()
            .unwrap()
            .get(&Check::Tokens)
            .unwrap()
            .clone();
        assert_eq!((c.client, c.server), (34.0, 33.0));
        assert!(s.has(&Flag::ImpossibleTiming) && !s.usable());
        // Fewer events than tokens is speculative decoding or a batched stream: possible.
        let s = target_sample(4096, Ok(outcome(Some(0), 4096, 33, 9)));
        assert!(!s.has(&Flag::ImpossibleTiming));
        // A count made from the events themselves cannot contradict them.
        let mut o = outcome(Some(0), 4096, 33, 34);
        o.flags.push(Flag::OutputTokensFromEvents);
        let s = target_sample(4096, Ok(o));
        assert!(!s.has(&Flag::ImpossibleTiming), "{:?}", s.flags);
    }

    #[test]
    fn a_decode_rate_off_the_servers_own_is_flagged() {
        // Client 100 tok/s; the server says 94.5 (client 5.8% above, as recorded against
        // llama-server when the first token was read late): flagged.
        let mut o = outcome(Some(0), 4096, 33, 33);
        o.timings.as_mut().unwrap().predicted_per_second = Some(94.5);
        let s = target_sample(4096, Ok(o));
        assert!(s.has(&Flag::ClientServerDisagree));
        assert!(s.usable(), "TTFT still counts");
        // Within the margin: not flagged.
        let mut o = outcome(Some(0), 4096, 33, 33);
        o.timings.as_mut().unwrap().predicted_per_second = Some(98.0);
        let s = target_sample(4096, Ok(o));
        assert!(!s.has(&Flag::ClientServerDisagree));
        assert!((decode_ratio(&s).unwrap() - 100.0 / 98.0).abs() < 1e-9);
    }

    #[test]
    fn a_cached_count_up_to_the_nonce_end_is_cold_and_says_so() {
        let with_nonce = |cached| {
            let t = Target {
                nonce_end: Some(9),
                ..target()
            };
            make_sample(
                &t,
                4096,
                0,
                4096,
                "t".into(),
                Ok(outcome(Some(cached), 4096, 33, 33)),
            )
        };
        // BOS and one nonce token from the cache (a gateway in front of llama-server).
        let s = with_nonce(2);
        assert!(!s.contaminated && s.usable() && s.cache_verified);
        assert!(s.has(&Flag::CachedBeforeNonceEnd) && !s.has(&Flag::Contaminated));
        assert_eq!(s.nonce_end, Some(9));
        // Up to the nonce's last token: still nothing of the prompt's body reused.
        assert!(with_nonce(9).usable());
        // One token past it is reuse of the prompt itself.
        let past = with_nonce(10);
        assert!(past.contaminated && !past.usable() && past.has(&Flag::Contaminated));
        assert!(!past.has(&Flag::CachedBeforeNonceEnd));
        // Without a nonce any cached token is contamination, as before.
        assert!(target_sample(4096, Ok(outcome(Some(1), 4096, 33, 33))).contaminated);
        // The same rule for the server's /metrics counters.
        let mut m = with_nonce(0);
        let d = std::collections::BTreeMap::from([
            ("vllm:prefix_cache_hits_total".to_owned(), 2.0),
            ("vllm:prefix_cache_queries_total".to_owned(), 4096.0),
        ]);
        apply_cache_evidence(&mut m, &d);
        assert!(
            !m.contaminated && m.has(&Flag::CachedBeforeNonceEnd),
            "{:?}",
            m.flags
        );
        let d = std::collections::BTreeMap::from([
            ("vllm:prefix_cache_hits_total".to_owned(), 16.0),
            ("vllm:prefix_cache_queries_total".to_owned(), 4096.0),
        ]);
        apply_cache_evidence(&mut m, &d);
        assert!(m.contaminated && m.has(&Flag::Contaminated));
    }

    #[test]
    fn cache_hit_is_contaminated_and_unusable() {
        let s = target_sample(4096, Ok(outcome(Some(4095), 4096, 33, 33)));
        assert!(s.contaminated && !s.usable());
        assert!(s.has(&Flag::Contaminated));
    }

    #[test]
    fn wrong_length_and_unverified_cache_are_flagged() {
        let s = target_sample(4096, Ok(outcome(None, 4097, 33, 33)));
        assert_eq!(s.length_ok, Some(false));
        assert!(!s.usable());
        assert!(s.has(&Flag::CacheUnverified));
        assert!(s.has(&Flag::LengthMismatch));
    }

    #[test]
    fn failures_keep_their_cause() {
        let e = ClientError::Transport {
            endpoint: "/completion".into(),
            detail: "connection reset".into(),
        };
        let s = make_sample(&target(), 4096, 1, 4096, "t".into(), Err(e));
        assert_eq!(s.status, Status::Failed);
        let err = s.error.unwrap();
        assert_eq!(err.kind, ErrorKind::Transport);
        assert!(err.message.contains("connection reset"));
    }
}
