//! What the report says about samples whose timings the server's own contradict
//! (`impossible_timing`): a count when they are few, and one line naming what the server
//! sent when they are the run's norm — then the server, not the sample, is what is wrong.

use super::warning::{warn, Warning};
use ctxbench_schema::record::{Check, Flag, Impossible, Sample, Status};

/// The event quoted in the note is cut to this many characters: enough to show its fields.
const QUOTED_CHARS: usize = 160;

/// The run's `impossible_timing` warning, if any sample carries the flag: when at least half
/// of the completed samples do, one line saying what every (or most) sample's timings broke,
/// with the range of both numbers, and what the stream started with; otherwise a count.
pub fn warning(samples: &[Sample]) -> Option<Warning> {
    let completed = samples.iter().filter(|s| s.status == Status::Ok).count();
    let flagged: Vec<&Impossible> = samples
        .iter()
        .filter(|s| s.has(&Flag::ImpossibleTiming))
        .filter_map(|s| s.impossible.as_ref())
        .collect();
    if flagged.is_empty() {
        return None;
    }
    if flagged.len() * 2 < completed {
        return Some(warn(
            "impossible_timing",
            format!(
                "{} sample(s) had timings the server's own contradict ({}): no TTFT, prefill or decode figure from them; excluded from the table and the fits (evidence in each sample's `impossible`)",
                flagged.len(),
                what_broke(&flagged, "the").join("; ")
            ),
        ));
    }
    let who = if flagged.len() == completed {
        "every sample's".to_owned()
    } else {
        format!("{} of {completed} samples'", flagged.len())
    };
    let mut line = what_broke(&flagged, &who).join("; ");
    if let Some(first) = opening(&flagged) {
        line.push_str(&format!(": the stream starts with {first}"));
    }
    line.push_str(
        "; no TTFT, prefill or decode figure is reported from these samples (impossible_timing)",
    );
    Some(warn("impossible_timing", line))
}

/// One clause per bound the flagged samples broke, most often broken first, each with the
/// range of the client's and the server's numbers.
fn what_broke(flagged: &[&Impossible], who: &str) -> Vec<String> {
    let mut clauses: Vec<(usize, String)> = [Check::Ttft, Check::Decode, Check::Tokens]
        .into_iter()
        .filter_map(|check| {
            let hits: Vec<(f64, f64)> = flagged
                .iter()
                .filter_map(|i| i.get(&check))
                .map(|c| (c.client, c.server))
                .collect();
            let client = range(hits.iter().map(|h| h.0))?;
            let server = range(hits.iter().map(|h| h.1))?;
            let text = match check {
                Check::Ttft => format!("{who} first token arrived before the server finished reading the prompt (client TTFT {client} ms, the server's own prompt_ms {server} ms)"),
                Check::Decode => format!("{who} last token arrived before the server finished generating (client {client} ms after sending, the server's own prompt_ms + predicted_ms {server} ms)"),
                _ => format!("{who} stream carried more token events than the server generated tokens ({client} events, {server} tokens)"),
            };
            Some((hits.len(), text))
        })
        .collect();
    clauses.sort_by_key(|c| std::cmp::Reverse(c.0));
    clauses.into_iter().map(|(_, t)| t).collect()
}

/// "a–b" (or "a" when equal) over `xs`, printed as the numbers were recorded.
fn range(xs: impl Iterator<Item = f64>) -> Option<String> {
    let (lo, hi) = xs.fold(None, |acc: Option<(f64, f64)>, x| {
        Some(acc.map_or((x, x), |(l, h)| (l.min(x), h.max(x))))
    })?;
    let fmt = |x: f64| ctxbench_schema::units::num(x);
    Some(if lo == hi {
        fmt(lo)
    } else {
        format!("{}–{}", fmt(lo), fmt(hi))
    })
}

/// What the server sent as the first token, named: a progress event (llama.cpp's
/// `prompt_progress`) is a stale one, read as a token; anything else is quoted as it came.
fn opening(flagged: &[&Impossible]) -> Option<String> {
    let early = flagged.iter().any(|i| i.get(&Check::Ttft).is_some());
    let ev = flagged.iter().find_map(|i| i.first_event.as_deref())?;
    let quoted = match ev.char_indices().nth(QUOTED_CHARS) {
        Some((i, _)) => format!("{}…", &ev[..i]),
        None => ev.to_owned(),
    };
    Some(match (ev.contains("prompt_progress"), early) {
        (true, true) => {
            format!("a stale progress event sent before the prefill was done (`{quoted}`)")
        }
        (true, false) => format!("a progress event read as a token (`{quoted}`)"),
        (false, true) => format!("an event sent before the prefill was done (`{quoted}`)"),
        (false, false) => format!("`{quoted}`"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_schema::record::Contradiction;

    fn flagged(ttft: f64, prompt_ms: f64, first: &str) -> Sample {
        Sample {
            status: Status::Ok,
            flags: vec![Flag::ImpossibleTiming],
            impossible: Some(Impossible {
                checks: vec![Contradiction {
                    check: Check::Ttft,
                    client: ttft,
                    server: prompt_ms,
                    tolerance: prompt_ms * 0.1,
                }],
                first_event: Some(first.to_owned()),
            }),
            ..Sample::default()
        }
    }

    fn fine() -> Sample {
        Sample {
            status: Status::Ok,
            ..Sample::default()
        }
    }

    const STALE: &str = r#"{"content":"The","tokens":[450],"stop":false,"tokens_predicted":1,"prompt_progress":{"total":1024,"cache":0,"processed":0,"time_ms":0}}"#;

    #[test]
    fn the_norm_is_one_line_naming_what_the_server_sent() {
        let s = vec![flagged(5.0, 5453.7, STALE), flagged(76.0, 47600.0, STALE)];
        let w = warning(&s).unwrap();
        assert_eq!(w.kind, "impossible_timing");
        assert!(!w.message.contains('\n'), "one line: {}", w.message);
        assert!(
            w.message.starts_with(
                "every sample's first token arrived before the server finished reading the prompt"
            ),
            "{}",
            w.message
        );
        assert!(
            w.message.contains("5454–47600") && w.message.contains("5.00–76.00"),
            "both numbers: {}",
            w.message
        );
        assert!(w.message.contains("stale progress event"), "{}", w.message);
        assert!(
            w.message.contains("prompt_progress"),
            "quoted: {}",
            w.message
        );
    }

    #[test]
    fn a_few_are_counted_not_blamed_on_the_server() {
        let mut s = vec![flagged(5.0, 900.0, STALE)];
        s.extend((0..5).map(|_| fine()));
        let w = warning(&s).unwrap();
        assert!(
            w.message.starts_with("1 sample(s) had timings"),
            "{}",
            w.message
        );
        assert!(!w.message.contains("stream starts with"), "{}", w.message);
        assert!(warning(&[fine(), fine()]).is_none());
    }
}
