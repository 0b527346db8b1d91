//! What the report says about sharing the server: the idle guard's waits and the samples it
//! flagged (`foreign_load`, `idle_wait_expired`, `held_back_stream`), read from the samples.

use super::warning::{warn, Warning};
use ctxbench_schema::record::{Flag, Sample, ServerInfo};

/// What a run's samples say about sharing the server.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Samples whose idle state was checked (they carry `idle_wait_ms`).
    pub checked: usize,
    /// Of those, samples that had to wait for the server to be idle.
    pub waited: usize,
    /// The longest wait, ms.
    pub longest_wait_ms: f64,
    /// All waits together, ms.
    pub total_wait_ms: f64,
    /// Samples flagged `foreign_load`.
    pub foreign: usize,
    /// Of those, measured because `--idle-wait` ran out.
    pub expired: usize,
    /// Samples flagged `held_back_stream`.
    pub held_back: usize,
}

/// Counts the waits and flags of `samples`.
pub fn summarize(samples: &[Sample]) -> Summary {
    let mut s = Summary::default();
    for x in samples {
        if let Some(w) = x.idle_wait_ms {
            s.checked += 1;
            s.total_wait_ms += w;
            s.longest_wait_ms = s.longest_wait_ms.max(w);
            s.waited += usize::from(w > 0.0);
        }
        s.foreign += usize::from(x.has(&Flag::ForeignLoad));
        s.expired += usize::from(x.has(&Flag::IdleWaitExpired));
        s.held_back += usize::from(x.has(&Flag::HeldBackStream));
    }
    s
}

/// What the report says about sharing the server: how many samples waited and how long,
/// how many another client's work overlapped, held-back streams, and a server whose idle
/// state could not be checked.
pub fn report_warnings(server: &ServerInfo, samples: &[Sample]) -> Vec<Warning> {
    let s = summarize(samples);
    let mut w = Vec::new();
    w.extend(fleet_warning(server, samples));
    if s.waited > 0 || s.foreign > 0 {
        w.push(warn(
            "shared_server",
            format!(
                "shared server: {} of {} sample(s) waited for the server to be idle (longest {:.1} s, {:.1} s in all); {} sample(s) overlapped another client's work (foreign_load{}), excluded from the table and the fits and taken again",
                s.waited,
                s.checked,
                s.longest_wait_ms / 1000.0,
                s.total_wait_ms / 1000.0,
                s.foreign,
                match s.expired {
                    0 => String::new(),
                    n => format!(", {n} measured when --idle-wait ran out"),
                }
            ),
        ));
    }
    if let Some(d) = server.idle_check.as_deref() {
        if d.starts_with("the idle state could not be checked") || d.starts_with("not checked") {
            w.push(warn("idle_unchecked", d.to_owned()));
        }
    }
    if s.held_back > 0 {
        // Measured on sglang-router 0.3.2 (docs/fleets.md): on a kept-alive connection the
        // head of the stream waits for the client's delayed ACK of the response headers.
        let router = match server.router.as_ref() {
            Some(r) => format!(
                "; behind {}, a likely cause: a router that holds the head of a stream until the client's delayed ACK holds back every decode shorter than that wait (sglang-router 0.3.2 on a kept-alive connection: 40 ms measured, the kernel allows up to 200 ms); a longer --output-tokens measures it",
                r.kind
            ),
            None => String::new(),
        };
        w.push(warn(
            "held_back_stream",
            format!(
                "{} sample(s) received every token in one burst at the end of the stream (the server or a proxy held it back): no TTFT or decode rate for them, only the end-to-end time{router}",
                s.held_back
            ),
        ));
    }
    w
}

/// Behind a router: how the samples spread over the workers that served them, and how many
/// the serving worker of could not be told (with why), or that none could be read.
pub fn fleet_warning(server: &ServerInfo, samples: &[Sample]) -> Option<Warning> {
    let r = server.router.as_ref()?;
    let mut per: Vec<(String, usize)> = r.workers.iter().map(|u| (u.clone(), 0)).collect();
    let mut unknown = 0;
    let mut why = None;
    let mut read = 0;
    // Waves: requests per worker, summed over each concurrency level's waves (every sample
    // of a wave carries the wave's spread: it is counted once, from the wave's first).
    let mut waves: std::collections::BTreeMap<u32, std::collections::BTreeMap<String, u64>> =
        Default::default();
    let mut seen = std::collections::BTreeSet::new();
    for x in samples {
        let Some(f) = x.fleet.as_ref().filter(|f| !f.wave_spread.is_empty()) else {
            continue;
        };
        let c = x.concurrency.unwrap_or(1);
        if seen.insert((x.context_tokens, c, x.rep, x.wave)) {
            let level = waves.entry(c).or_default();
            for (w, n) in &f.wave_spread {
                *level.entry(w.clone()).or_default() += n;
            }
        }
    }
    for x in samples
        .iter()
        .filter(|x| x.fleet.as_ref().is_some_and(|f| f.wave_spread.is_empty()))
    {
        read += 1;
        let f = x
            .fleet
            .as_ref()
            .map(|f| (f.served_by.clone(), f.how.clone()));
        match f {
            Some((Some(u), _)) => match per.iter_mut().find(|(w, _)| *w == u) {
                Some((_, n)) => *n += 1,
                None => per.push((u, 1)),
            },
            Some((None, how)) => {
                unknown += 1;
                why.get_or_insert(how);
            }
            None => {}
        }
    }
    let message = match read {
        0 if !waves.is_empty() => format!("behind {}", r.kind),
        0 => format!(
            "behind {} ({} worker(s)): which worker served each sample is unknown, and idle and flush were not checked per worker (give each worker with --worker URL)",
            r.kind,
            r.workers.len()
        ),
        _ => {
            let spread: Vec<String> = per.iter().map(|(u, n)| format!("{u} {n}")).collect();
            let unknown = match unknown {
                0 => String::new(),
                n => format!(
                    "; {n} sample(s) with the serving worker unknown ({})",
                    why.unwrap_or_default()
                ),
            };
            format!(
                "behind {}: samples served per worker: {}{unknown}; each sample is judged against its worker, and work on any worker it does not account for flags it foreign_load",
                r.kind,
                spread.join(", ")
            )
        }
    };
    let waves: Vec<String> = waves
        .iter()
        .map(|(c, per)| {
            let per: Vec<String> = per.iter().map(|(w, n)| format!("{w} {n}")).collect();
            format!("concurrency {c}: {}", per.join(", "))
        })
        .collect();
    let message = match waves.is_empty() {
        true => message,
        false => format!(
            "{message}; the waves' requests per worker: {}",
            waves.join("; ")
        ),
    };
    Some(warn("router", message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_schema::record::RouterInfo;

    fn held_back() -> Vec<Sample> {
        vec![Sample {
            flags: vec![Flag::HeldBackStream],
            ..Sample::default()
        }]
    }

    fn held_back_text(server: &ServerInfo) -> String {
        report_warnings(server, &held_back())
            .into_iter()
            .find(|w| w.kind == "held_back_stream")
            .map(|w| w.message)
            .unwrap_or_default()
    }

    #[test]
    fn a_held_back_stream_behind_a_router_names_the_delayed_ack_and_the_way_out() {
        let behind = ServerInfo {
            router: Some(RouterInfo {
                kind: "sglang-router".into(),
                ..RouterInfo::default()
            }),
            ..ServerInfo::default()
        };
        let t = held_back_text(&behind);
        assert!(t.starts_with("1 sample(s) received every token"), "{t}");
        assert!(
            t.contains("behind sglang-router, a likely cause") && t.contains("delayed ACK"),
            "{t}"
        );
        assert!(t.contains("a longer --output-tokens"), "{t}");
        // One server: no router to blame.
        let alone = held_back_text(&ServerInfo::default());
        assert!(
            alone.starts_with("1 sample(s)") && !alone.contains("router"),
            "{alone}"
        );
    }
}
