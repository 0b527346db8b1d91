//! Speculative steps along the position in the context, from token arrival times (issue 45,
//! point 2). llama-server streams each token as its own SSE event and writes a verify step's
//! accepted tokens back to back (recorded on the reference build: 0.02–0.1 ms apart, often in
//! one read, against 650–1200 ms between steps on a loaded 2-core host), so the gaps between
//! arrivals fall in two groups orders of magnitude apart: the small ones join tokens into
//! steps. A server that sends a step as one event with several tokens (vLLM,
//! SGLang) or one token per event with no gap structure shows no steps: nothing is recorded.
//! A client descheduled across a step boundary merges two steps into one (rare; it inflates
//! that bucket's tokens per step).

use std::time::Instant;

use ctxbench_schema::record::steps_along::StepsAlong;

/// The smallest ratio between the two gap groups' geometric means taken as steps (the
/// reference build shows 1000× and more; a plain stream's gaps vary by far less).
pub const MIN_SPLIT_RATIO: f64 = 10.0;

/// The smallest share of gaps in the within-step group: a plain stream whose client was
/// descheduled once or twice has a few near-zero gaps, a speculative one that accepts
/// anything has many.
pub const MIN_WITHIN_SHARE: f64 = 0.1;

/// Gaps under the typical between-step gap ÷ this are within a step.
const STEP_FRACTION: f64 = 10.0;

/// Gaps are floored here (ms) so that two events of one read (gap 0) have a finite ratio.
const GAP_FLOOR_MS: f64 = 0.001;

/// Buckets per sample at most (results-file size: two counts per bucket).
const MAX_BUCKETS: u64 = 16;

/// The smallest bucket, in positions.
const MIN_BUCKET: u64 = 16;

/// The gap (ms) that splits `gaps` into within-step and between-step ones: the two groups
/// of the log gaps with the largest between-group variance (Otsu's rule; a few gaps of a
/// descheduled client in between move no boundary), kept when the groups' geometric means
/// are at least [`MIN_SPLIT_RATIO`] apart and at least [`MIN_WITHIN_SHARE`] of the gaps lie
/// in the lower one; `None` otherwise (the stream shows no steps). The split is then the
/// boundary, or a tenth of the upper group's median where that is higher.
pub fn split_ms(gaps: &[f64]) -> Option<f64> {
    let mut g: Vec<f64> = gaps.iter().map(|x| x.max(GAP_FLOOR_MS).ln()).collect();
    g.sort_by(f64::total_cmp);
    let n = g.len();
    let total: f64 = g.iter().sum();
    let mut below = 0.0;
    let mut best: Option<(f64, usize, f64, f64)> = None;
    for i in 1..n {
        below += g[i - 1];
        let (w0, w1) = (i as f64, (n - i) as f64);
        let (m0, m1) = (below / w0, (total - below) / w1);
        let between = w0 * w1 * (m1 - m0).powi(2);
        if best.is_none_or(|b| between > b.0) {
            best = Some((between, i, m0, m1));
        }
    }
    let (_, i, m0, m1) = best?;
    let share = i as f64 / n as f64;
    if !(m1 - m0 >= MIN_SPLIT_RATIO.ln() && share >= MIN_WITHIN_SHARE) {
        return None;
    }
    // A step takes a draft and a verify pass: no step is 10× faster than the typical one,
    // while a client descheduled inside a step leaves gaps of several ms there (up to
    // 16 ms recorded on a loaded host).
    let typical_step = g[i + (n - i) / 2].exp();
    Some(
        ((g[i - 1] + g[i]) / 2.0)
            .exp()
            .max(typical_step / STEP_FRACTION),
    )
}

/// Tokens per step, in order, from the gaps between consecutive arrivals of the decode
/// tokens (the prefill's first token excluded), split at `split`.
pub fn steps(gaps: &[f64], split: f64) -> Vec<u32> {
    let mut out = vec![1u32];
    for &g in gaps {
        match out.last_mut() {
            Some(n) if g < split => *n += 1,
            _ => out.push(1),
        }
    }
    out
}

/// Positions per bucket for `output` tokens: a power of two, at least [`MIN_BUCKET`], with
/// at most [`MAX_BUCKETS`] buckets.
pub fn bucket_tokens(output: u64) -> u64 {
    output
        .div_ceil(MAX_BUCKETS)
        .max(MIN_BUCKET)
        .next_power_of_two()
}

/// Steps along the context of one stream: `times` are the arrivals of its token events
/// (one token each), `prompt` the prompt's tokens (the first output token is at that
/// position). `None` when there are fewer than three decode tokens or no step structure.
pub fn of(times: &[Instant], prompt: u64) -> Option<StepsAlong> {
    // The first token comes from the prefill; steps start with the second.
    let decode = times.get(1..)?;
    if decode.len() < 3 {
        return None;
    }
    let gaps: Vec<f64> = decode
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1000.0)
        .collect();
    let split = split_ms(&gaps)?;
    let width = bucket_tokens(decode.len() as u64);
    let from = prompt + 1;
    let n = (decode.len() as u64).div_ceil(width) as usize;
    let (mut st, mut tk) = (vec![0u32; n], vec![0u32; n]);
    let mut pos = from;
    for k in steps(&gaps, split) {
        let b = ((pos - from) / width) as usize;
        if let (Some(s), Some(t)) = (st.get_mut(b), tk.get_mut(b)) {
            *s += 1;
            *t += k;
        }
        pos += u64::from(k);
    }
    Some(StepsAlong {
        from_tokens: from,
        bucket_tokens: width as u32,
        steps: st,
        tokens: tk,
        split_ms: (split * 1000.0).round() / 1000.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Arrivals: a prefill token, then steps of `sizes` tokens 0.05 ms apart, 800 ms apart.
    fn arrivals(sizes: &[u32]) -> Vec<Instant> {
        let t0 = Instant::now();
        let mut t = t0;
        let mut out = vec![t0];
        for &k in sizes {
            t += Duration::from_millis(800);
            for i in 0..k {
                out.push(t + Duration::from_micros(50 * u64::from(i)));
            }
        }
        out
    }

    #[test]
    fn bursts_become_steps_in_position_buckets() {
        // 4 steps of 9, then 8 steps of 2: 52 decode tokens, buckets of 16.
        let mut sizes = vec![9; 4];
        sizes.extend([2; 8]);
        let s = of(&arrivals(&sizes), 100).unwrap();
        assert_eq!((s.from_tokens, s.bucket_tokens), (101, 16));
        // Steps start at 101, 110 | 119, 128 | 137, 139, … 147 | 149, 151.
        assert_eq!(s.steps, vec![2, 2, 6, 2]);
        assert_eq!(s.tokens, vec![18, 18, 12, 4]);
        assert_eq!(s.tokens.iter().sum::<u32>(), 52);
        assert!(s.split_ms > 0.05 && s.split_ms < 800.0, "{}", s.split_ms);
    }

    #[test]
    fn a_descheduled_client_inside_steps_does_not_split_them() {
        // Steps of 9, 800 ms apart; inside some steps one gap of 3–16 ms.
        let t0 = Instant::now();
        let mut times = vec![t0];
        let mut t = t0;
        for step in 0..12u64 {
            t += Duration::from_millis(800);
            for i in 0..9u64 {
                let late = if i == 4 && step % 3 == 0 { 3 + step } else { 0 };
                t += Duration::from_micros(50) + Duration::from_millis(late);
                times.push(t);
            }
        }
        let s = of(&times, 0).unwrap();
        assert_eq!(s.steps.iter().sum::<u32>(), 12, "{s:?}");
        assert!(s.split_ms >= 16.0 && s.split_ms < 800.0, "{}", s.split_ms);
    }

    #[test]
    fn even_gaps_show_no_steps() {
        // A plain stream: every token its own event, 95–105 ms apart.
        let t0 = Instant::now();
        let times: Vec<Instant> = (0..40u64)
            .map(|i| t0 + Duration::from_millis(100 * i + (i * 7) % 11))
            .collect();
        assert_eq!(of(&times, 10), None);
        assert_eq!(of(&times[..3], 10), None);
        // The same with two tokens read together (a descheduled client): 1 gap in 38.
        let mut hiccup = times.clone();
        hiccup[20] = hiccup[19];
        assert_eq!(of(&hiccup, 10), None);
    }

    #[test]
    fn bucket_width_keeps_at_most_16_buckets() {
        assert_eq!(bucket_tokens(10), 16);
        assert_eq!(bucket_tokens(511), 32);
        assert_eq!(bucket_tokens(4096), 256);
        assert_eq!(bucket_tokens(4097), 512);
    }
}
