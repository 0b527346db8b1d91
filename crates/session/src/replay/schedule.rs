//! When each request of a trace is due. Open loop: at the trace's timestamps divided by the
//! speed, whatever the answers do. Per session: a session's first request at its timestamp
//! (or at once), each next one after the previous answer plus its think time. Gaps are kept
//! whole; `max_gap` cuts them only when asked. Pure: the driver turns offsets into instants.

use std::collections::{HashMap, VecDeque};

use ctxbench_schema::record::replay::ReplayTiming;
use ctxbench_trace::TraceRequest;

/// How a replay releases its requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Open loop or per session.
    pub mode: ReplayTiming,
    /// Trace time is divided by this.
    pub speed: f64,
    /// Gaps longer than this (ms, after `speed`) are cut to it.
    pub max_gap_ms: Option<f64>,
}

impl Timing {
    /// A gap of `ms` trace milliseconds as replayed.
    pub fn gap(&self, ms: f64) -> f64 {
        let g = ms.max(0.0) / self.speed;
        self.max_gap_ms.map_or(g, |m| g.min(m))
    }
}

/// Each request's open-loop offset from the first, ms (requests without a timestamp at 0),
/// by position in `requests`: the timestamps in order, each gap replayed through
/// [`Timing::gap`].
pub fn open_loop_offsets(requests: &[&TraceRequest], t: &Timing) -> Vec<f64> {
    let mut order: Vec<usize> = (0..requests.len()).collect();
    let at = |i: usize| requests[i].at_ms.unwrap_or(0.0);
    order.sort_by(|&a, &b| at(a).total_cmp(&at(b)).then(a.cmp(&b)));
    let mut out = vec![0.0; requests.len()];
    let (mut prev_at, mut prev_off) = (None::<f64>, 0.0);
    for i in order {
        let off = match prev_at {
            None => 0.0,
            Some(p) => prev_off + t.gap(at(i) - p),
        };
        out[i] = off;
        prev_at = Some(at(i));
        prev_off = off;
    }
    out
}

/// The requests of each session in trace order (a request without a session is a session
/// of its own), by position in `requests`, with the sessions in order of first appearance.
pub fn sessions(requests: &[&TraceRequest]) -> Vec<VecDeque<usize>> {
    let mut by: HashMap<&str, usize> = HashMap::new();
    let mut out: Vec<VecDeque<usize>> = Vec::new();
    for (i, r) in requests.iter().enumerate() {
        match &r.session {
            Some(s) => {
                let k = *by.entry(s.as_str()).or_insert_with(|| {
                    out.push(VecDeque::new());
                    out.len() - 1
                });
                out[k].push_back(i);
            }
            None => out.push(VecDeque::from([i])),
        }
    }
    out
}

/// The span of an open-loop schedule, ms.
pub fn span_ms(offsets: &[f64]) -> f64 {
    offsets.iter().copied().fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(index: u64, session: Option<&str>, at: f64) -> TraceRequest {
        TraceRequest {
            index,
            session: session.map(str::to_owned),
            turn: 0,
            at_ms: Some(at),
            think_ms: None,
            input_tokens: 10,
            output_tokens: 1,
            blocks: vec![],
            block_tokens: 64,
        }
    }

    #[test]
    fn open_loop_keeps_gaps_whole_unless_capped_and_divides_by_the_speed() {
        let rs = [
            req(0, None, 1000.0),
            req(1, None, 1500.0),
            req(2, None, 121_500.0),
        ];
        let refs: Vec<&TraceRequest> = rs.iter().collect();
        let whole = Timing {
            mode: ReplayTiming::OpenLoop,
            speed: 1.0,
            max_gap_ms: None,
        };
        assert_eq!(
            open_loop_offsets(&refs, &whole),
            vec![0.0, 500.0, 120_500.0]
        );
        let fast = Timing {
            speed: 2.0,
            ..whole
        };
        assert_eq!(open_loop_offsets(&refs, &fast), vec![0.0, 250.0, 60_250.0]);
        let capped = Timing {
            max_gap_ms: Some(10_000.0),
            ..whole
        };
        assert_eq!(
            open_loop_offsets(&refs, &capped),
            vec![0.0, 500.0, 10_500.0]
        );
        assert_eq!(span_ms(&open_loop_offsets(&refs, &capped)), 10_500.0);
    }

    #[test]
    fn sessions_keep_trace_order_and_lone_requests_are_their_own() {
        let rs = [
            req(0, Some("a"), 0.0),
            req(1, Some("b"), 0.0),
            req(2, None, 0.0),
            req(3, Some("a"), 0.0),
        ];
        let refs: Vec<&TraceRequest> = rs.iter().collect();
        let s = sessions(&refs);
        assert_eq!(
            s,
            vec![
                VecDeque::from([0, 3]),
                VecDeque::from([1]),
                VecDeque::from([2])
            ]
        );
    }
}
