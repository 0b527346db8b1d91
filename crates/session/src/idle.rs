//! Shared servers: measure only an idle server, and say so when it was not. Before each
//! measured request ctxbench reads the server's busy state (what each family exposes:
//! llama.cpp `/slots`, SGLang `/v1/loads`, vLLM's running and waiting gauges, see
//! `Family::busy_sources`) and waits, up to `--idle-wait`, until nothing runs; after it, it
//! reads the state again and compares the server's request counters across the sample
//! (`MetricsVocabulary::served`). Any sign of another client's work during the sample flags
//! it `foreign_load`, which keeps it out of every summary.
//!
//! The signs, each server-side: the server still busy right after the sample (a request that
//! may have overlapped it; at worst one that started just after it, a false alarm that costs
//! one repetition), a llama.cpp slot other than the sample's taking a new task, and a
//! finished-request (or generated-token) counter rising by more than the sample itself
//! explains. Parsing is pure and unit-tested; the reads go through [`Http`].

use std::sync::{Arc, Mutex};
use std::time::Duration;

// tokio's clock, so the wait can be tested on a paused clock.
use tokio::time::Instant;

use ctxbench_client::{Http, Scraper};
use ctxbench_schema::error::ClientError;

pub use ctxbench_client::busy::{BusySource, Reading, Served, ServedUnit};

/// How the loop tells whether the server is idle; built once per run by the session.
#[derive(Clone)]
pub struct IdleCheck {
    http: Http,
    /// `None`: only the counters after each sample (nothing says busy before it).
    source: Option<BusySource>,
    scraper: Option<Scraper>,
    /// Longest wait for the server to be idle before a sample (`--idle-wait`).
    pub wait: Duration,
    /// Our own finished work the counters had not shown yet at the last sample's end
    /// (a server that counts a request a moment after its last byte): it is not foreign.
    owed: Arc<Mutex<f64>>,
}

impl std::fmt::Debug for IdleCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdleCheck")
            .field("source", &self.source)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

/// What the wait before a sample found.
#[derive(Debug, Clone, Default)]
pub struct Waited {
    /// How long it waited (zero when the first reading found the server idle).
    pub waited: Duration,
    /// The server was still busy when the wait ran out.
    pub expired: bool,
    /// The last reading (the state the sample started from); `None`: unreadable.
    pub before: Option<Reading>,
}

/// Polling interval of the wait: starts short (a burst's gaps are short) and doubles.
const POLL_FIRST: Duration = Duration::from_millis(50);
const POLL_MAX: Duration = Duration::from_millis(500);
/// Once a busy server reads idle, it is read again this much later before the sample is
/// sent: a client sending requests back to back leaves gaps shorter than this.
pub const SETTLE: Duration = Duration::from_millis(250);

impl IdleCheck {
    /// A check reading `source` on `http`'s server (gauges through `scraper`).
    pub fn new(
        http: Http,
        source: Option<BusySource>,
        scraper: Option<Scraper>,
        wait: Duration,
    ) -> Self {
        IdleCheck {
            http,
            source,
            scraper,
            wait,
            owed: Arc::new(Mutex::new(0.0)),
        }
    }

    /// What this check reads before and after each sample (`None`: counters only).
    pub fn source(&self) -> Option<BusySource> {
        self.source
    }

    /// Reads the busy state once.
    pub async fn read(&self) -> Result<Reading, ClientError> {
        let Some(source) = self.source else {
            return Err(ClientError::Malformed {
                endpoint: "-".to_owned(),
                detail: "no busy signal on this server".to_owned(),
            });
        };
        ctxbench_client::busy::read(&self.http, source, self.scraper.as_ref()).await
    }

    /// Waits until the server reads idle (and, once it was busy, still reads idle
    /// [`SETTLE`] later), at most `self.wait`. `on_busy` is called once when the first busy
    /// reading makes ctxbench wait. A reading that fails ends the wait: the sample is
    /// measured, and only the checks after it can flag it.
    pub async fn wait_idle(&self, on_busy: &mut dyn FnMut(&Reading)) -> Waited {
        let start = Instant::now();
        if self.source.is_none() {
            return Waited::default();
        }
        let mut poll = POLL_FIRST;
        let mut was_busy = false;
        let mut told = false;
        loop {
            let r = match self.read().await {
                Ok(r) => r,
                Err(_) => {
                    return Waited {
                        waited: if told {
                            start.elapsed()
                        } else {
                            Duration::ZERO
                        },
                        expired: false,
                        before: None,
                    }
                }
            };
            if r.active == 0 {
                if !was_busy {
                    // Idle at the first reading: one round-trip, no wait.
                    let waited = match told {
                        true => start.elapsed(),
                        false => Duration::ZERO,
                    };
                    return Waited {
                        waited,
                        expired: false,
                        before: Some(r),
                    };
                }
                // Idle after busy: read once more a moment later.
                was_busy = false;
                tokio::time::sleep(SETTLE).await;
                continue;
            }
            if !told {
                told = true;
                on_busy(&r);
            }
            was_busy = true;
            // Read until the bound is reached, the last read at it.
            let left = self.wait.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Waited {
                    waited: start.elapsed(),
                    expired: true,
                    before: Some(r),
                };
            }
            tokio::time::sleep(poll.min(left)).await;
            poll = (poll * 2).min(POLL_MAX);
        }
    }

    /// The evidence that another client's work overlapped a sample that sent `requests`
    /// requests and generated `generated` tokens: the state read again now against
    /// `before`, and the counter increase `served` (from the sample's metric deltas).
    /// `None`: no sign of foreign work.
    pub async fn after(
        &self,
        before: Option<&Reading>,
        requests: u64,
        generated: Option<u64>,
        served: Option<Served>,
    ) -> Option<String> {
        let mut why = Vec::new();
        if let Ok(now) = self.read().await {
            if let Some(w) = busy_after(&now) {
                why.push(w);
            }
            if let Some(b) = before {
                if let Some(w) = other_slots(b, &now, requests) {
                    why.push(w);
                }
            }
        }
        if let Some(s) = served {
            let mut owed = self.owed.lock().unwrap_or_else(|e| e.into_inner());
            let (w, left) = unexplained(s, requests, generated, *owed);
            *owed = left;
            why.extend(w);
        }
        (!why.is_empty()).then(|| why.join("; "))
    }
}

/// What [`discover`] settled: the check (`None`: nothing to read) and the header's line.
pub struct Discovered {
    /// The check to run around every sample.
    pub check: Option<IdleCheck>,
    /// How the idle state is checked, or why it could not be.
    pub description: String,
}

/// Tries `sources` in order on the server and keeps the first that answers; with a metrics
/// page carrying a finished-work counter (`served_counter`), the counters are compared
/// around every sample too. Never fails: a server that exposes nothing gets a description
/// saying the idle state could not be checked.
pub async fn discover(
    http: &Http,
    sources: &[BusySource],
    scraper: Option<&Scraper>,
    served_counter: Option<&'static str>,
    wait: Duration,
) -> Discovered {
    let mut refused = Vec::new();
    let mut found = None;
    for &src in sources {
        if matches!(src, BusySource::MetricsGauges(_)) && scraper.is_none() {
            refused.push(format!("{}: metrics are off", src.describe()));
            continue;
        }
        let c = IdleCheck::new(http.clone(), Some(src), scraper.cloned(), wait);
        match c.read().await {
            Ok(_) => {
                found = Some(c);
                break;
            }
            Err(e) => refused.push(format!("{}: {e}", src.describe())),
        }
    }
    let counters = served_counter.map(|c| format!("{c} (/metrics) compared across each sample"));
    let tried = match refused.is_empty() {
        true => String::new(),
        false => format!(" ({})", refused.join("; ")),
    };
    match (found, counters) {
        (Some(c), counters) => {
            let source = c.source.map(|s| s.describe()).unwrap_or_default();
            let also = counters.map_or(String::new(), |k| format!("; {k}"));
            Discovered {
                description: format!(
                    "{source} read before each sample (waiting up to {} s for idle) and after it{also}{tried}",
                    wait.as_secs_f64()
                ),
                check: Some(c),
            }
        }
        (None, Some(k)) => Discovered {
            description: format!(
                "no busy signal, so ctxbench cannot wait for idle; only {k}{tried}"
            ),
            check: Some(IdleCheck::new(http.clone(), None, scraper.cloned(), wait)),
        },
        (None, None) => Discovered {
            description: format!(
                "the idle state could not be checked: the server exposes nothing ctxbench can read{tried}; samples may include other clients' work"
            ),
            check: None,
        },
    }
}

/// The server still busy right after the sample.
fn busy_after(now: &Reading) -> Option<String> {
    (now.active > 0).then(|| {
        format!(
            "the server was busy right after the sample ({} request(s) running or waiting)",
            now.active
        )
    })
}

/// llama.cpp: more slots took a new task during the sample than it sent requests.
pub fn other_slots(before: &Reading, after: &Reading, requests: u64) -> Option<String> {
    let changed: Vec<String> = after
        .tasks
        .iter()
        .filter(|(slot, task)| before.tasks.get(slot) != Some(task))
        .map(|(slot, task)| format!("slot {slot} → task {task}"))
        .collect();
    (changed.len() as u64 > requests).then(|| {
        format!(
            "{} slots took new tasks during the sample, which sent {requests} request(s): {}",
            changed.len(),
            changed.join(", ")
        )
    })
}

/// Counter increase beyond the sample's own share (plus what the last sample still owed):
/// the evidence, and what is still owed afterwards (our share not yet counted, carried to
/// the next sample only).
pub fn unexplained(
    s: Served,
    requests: u64,
    generated: Option<u64>,
    owed: f64,
) -> (Option<String>, f64) {
    let own = match s.unit {
        ServedUnit::Requests => requests as f64,
        // Without the sample's own count, nothing can be told apart.
        ServedUnit::GeneratedTokens => match generated {
            Some(g) => g as f64,
            None => return (None, 0.0),
        },
    };
    let expected = own + owed;
    let unit = match s.unit {
        ServedUnit::Requests => "request(s)",
        ServedUnit::GeneratedTokens => "generated token(s)",
    };
    // Half a unit of slack: counters are integers, read as floats.
    if s.count > expected + 0.5 {
        let w = format!(
            "{} rose by {} {unit} during the sample, which accounts for {}",
            s.counter, s.count, own
        );
        (Some(w), 0.0)
    } else {
        // Our own share not counted yet shows up next time; carried once.
        (None, (own - s.count).max(0.0).min(own))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn a_second_slot_taking_a_task_is_foreign() {
        let before = Reading {
            active: 0,
            tasks: BTreeMap::from([(0, 10), (1, 11)]),
        };
        let ours = Reading {
            active: 0,
            tasks: BTreeMap::from([(0, 14), (1, 11)]),
        };
        assert_eq!(other_slots(&before, &ours, 1), None);
        let both = Reading {
            active: 0,
            tasks: BTreeMap::from([(0, 14), (1, 15)]),
        };
        let w = other_slots(&before, &both, 1).unwrap();
        assert!(w.contains("slot 1 → task 15"), "{w}");
        // Two-point: two requests may take two slots.
        assert_eq!(other_slots(&before, &both, 2), None);
        // A slot that had never run a task takes its first.
        let fresh = Reading {
            active: 0,
            tasks: BTreeMap::from([(0, 10)]),
        };
        assert!(other_slots(&fresh, &both, 1).is_some());
    }

    fn served(unit: ServedUnit, count: f64) -> Served {
        Served {
            counter: "c",
            unit,
            count,
        }
    }

    #[test]
    fn counters_beyond_the_samples_own_share_are_foreign() {
        use ServedUnit::*;
        // One request, counted once: clean.
        assert_eq!(
            unexplained(served(Requests, 1.0), 1, None, 0.0),
            (None, 0.0)
        );
        // Three finished: two were someone else's.
        let (w, owed) = unexplained(served(Requests, 3.0), 1, None, 0.0);
        assert!(w.unwrap().contains("rose by 3"));
        assert_eq!(owed, 0.0);
        // Counted late: owed once, then explained by the next sample.
        assert_eq!(
            unexplained(served(Requests, 0.0), 1, None, 0.0),
            (None, 1.0)
        );
        assert_eq!(
            unexplained(served(Requests, 2.0), 1, None, 1.0),
            (None, 0.0)
        );
        // Generated tokens: the sample's own 32, and 64 more.
        assert_eq!(
            unexplained(served(GeneratedTokens, 32.0), 1, Some(32), 0.0).0,
            None
        );
        assert!(unexplained(served(GeneratedTokens, 96.0), 1, Some(32), 0.0)
            .0
            .is_some());
        // No own count: nothing told apart.
        assert_eq!(
            unexplained(served(GeneratedTokens, 96.0), 1, None, 0.0),
            (None, 0.0)
        );
    }

    #[test]
    fn busy_right_after_is_evidence() {
        assert!(busy_after(&Reading::default()).is_none());
        let r = Reading {
            active: 2,
            tasks: BTreeMap::new(),
        };
        assert!(busy_after(&r).unwrap().contains("2 request(s)"));
    }
}
