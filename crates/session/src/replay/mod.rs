//! `ctxbench replay`: a trace is a plan. Its blocks become fixed token-id blocks
//! ([`prompts`]), a scheduler releases its requests at their times (open loop) or after each
//! answer plus its think time (per session) ([`schedule`]), each request goes through the
//! measuring protocol's pieces (send watched for a dying server and the user's interrupt, the
//! sample judged as every sweep's, recorded and synced as measured) and is recorded with what
//! the trace lets it reuse beside what the server says it did ([`proof`]). No per-request
//! flush: reuse is the point; the cache is flushed once at the start where the server
//! allows, and the first requests' cached counts prove the start was cold.

pub mod clock;
pub mod prompts;
pub mod proof;
pub mod schedule;

use std::cmp::Reverse;
use std::collections::VecDeque;
use std::collections::{BinaryHeap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use crate::bench::protocol::{self, note_flush, now, watch_server};
use crate::bench::{BenchSettings, Observer, Tally};
use crate::fleet::WorkerState;
use crate::sample::{make_sample, Target};
use ctxbench_client::{Backend, GenOutcome, GenRequest};
use ctxbench_schema::error::{ClientError, RecordError};
use ctxbench_schema::record::replay::{ReplayInfo, ReplayTiming};
use ctxbench_schema::record::{Phase, ResultsWriter, Sample};
use ctxbench_trace::TraceRequest;

pub use prompts::BlockPrompts;
pub use proof::{Capacity, Expectation, Ledger};
pub use schedule::Timing;

/// What a replay drives: the protocol, the prompts, the loop's settings and what the proof
/// needs of the server.
pub struct Driver<'a> {
    /// The server's protocol.
    pub backend: &'a dyn Backend,
    /// Token ids of each request.
    pub prompts: BlockPrompts,
    /// Timeouts, tolerances, the flush decision, the failure policy, the run id.
    pub settings: &'a BenchSettings,
    /// The family's allowance for a shared prefix of L tokens (tokens it recomputes).
    pub allowance: &'a (dyn Fn(u64) -> u64 + Sync),
    /// The pool and slots a cause of a shortfall is named from.
    pub capacity: Capacity,
    /// When requests are released.
    pub timing: Timing,
}

/// A request in flight and, once answered, what came back.
struct Done {
    pos: usize,
    due_ms: f64,
    sent_ms: f64,
    at: String,
    sent_tokens: u64,
    expectation: Expectation,
    result: Result<GenOutcome, ClientError>,
    /// Behind a router: every worker's state read right before and right after it.
    workers: Option<(Vec<WorkerState>, Vec<WorkerState>)>,
    /// Requests sent before it and in flight when it was sent (to tell whether it ran
    /// alone, the only case where the workers' states say which one served it).
    sent_before: u64,
    in_flight_at_send: usize,
}

/// Samples on their way to the writer thread.
type LineSender = std::sync::mpsc::Sender<Sample>;
/// The writer thread: its first error, if any.
type WriterThread = std::thread::JoinHandle<Result<(), RecordError>>;

type InFlight<'f> = FuturesUnordered<Pin<Box<dyn Future<Output = Done> + 'f>>>;

/// Replays `requests` (the trace's order; those whose index is in `done` were recorded by an
/// earlier session of this run and are skipped); every answer is written as it comes.
pub async fn run(
    d: &Driver<'_>,
    requests: &[TraceRequest],
    done: &HashSet<u64>,
    writer: &ResultsWriter,
    observer: &mut dyn Observer,
    interrupt: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<Tally, RecordError> {
    let todo: Vec<&TraceRequest> = requests
        .iter()
        .filter(|r| !done.contains(&r.index))
        .collect();
    let mut tally = Tally {
        skipped: requests.len() - todo.len(),
        ..Default::default()
    };
    observer.start(todo.len(), tally.skipped);
    clock::tighten_timer_slack();
    // Flushed once, before the first request: the replay's own reuse is the measurement.
    let mut flushed = first_flush(d).await;
    let offsets = schedule::open_loop_offsets(&todo, &d.timing);
    let mut sessions = schedule::sessions(&todo);
    let start = Instant::now();
    let ms_since = |t: Instant| t.duration_since(start).as_secs_f64() * 1000.0;
    let key = |ms: f64| (ms * 1000.0).round().max(0.0) as u64;
    let (mut due, session_of) = first_due(&mut sessions, &offsets, d.timing.mode);
    let mut ledger = Ledger::new();
    let mut inflight: InFlight<'_> = FuturesUnordered::new();
    let mut sent: u64 = 0;
    // Lines are written and synced on a thread of their own: a disk sync must never make
    // the scheduler late.
    let (lines, written) = spawn_writer(writer)?;
    let mut stopping = false;
    loop {
        let next_due = due.peek().map(|Reverse((us, _))| *us);
        if inflight.is_empty() && (next_due.is_none() || stopping) {
            break;
        }
        let wake = next_due.filter(|_| !stopping).map(|us| {
            (start + Duration::from_micros(us))
                .checked_sub(clock::TIMER_SLACK)
                .unwrap_or(start)
        });
        tokio::select! {
            biased;
            _ = interrupt.wait_for(|v| *v) => {
                // What is in flight is not recorded: a resume sends it again.
                tally.interrupted = true;
                break;
            }
            _ = sleep_until(wake), if wake.is_some() => {
                let now_ms = ms_since(Instant::now());
                // Released a timer's slack early: each request waits out the rest itself,
                // prepared, and leaves at its due instant.
                let horizon = key(now_ms) + clock::TIMER_SLACK.as_micros() as u64;
                while let Some(&Reverse((us, p))) = due.peek() {
                    if us > horizon {
                        break;
                    }
                    due.pop();
                    observer.sample_started(todo[p].input_tokens, todo[p].turn);
                    let exp = ledger.expect(todo[p], now_ms);
                    let order = (sent, inflight.len());
                    sent += 1;
                    let due_ms = us as f64 / 1000.0;
                    let at = start + Duration::from_micros(us);
                    inflight.push(Box::pin(send(d, todo[p], (p, due_ms, at), exp, start, order)));
                }
            }
            Some(done) = inflight.next(), if !inflight.is_empty() => {
                let pos = done.pos;
                let r = todo[pos];
                let answered_ms = ms_since(Instant::now());
                // It ran alone when nothing was in flight at its send, nothing was sent
                // after it and nothing else is in flight now.
                let alone = done.in_flight_at_send == 0
                    && sent == done.sent_before + 1
                    && inflight.is_empty();
                let mut s = sample(d, r, done, answered_ms, alone, &mut ledger);
                if let Some(f) = flushed.take() {
                    note_flush(&mut s, Some(f));
                }
                if lines.send(s.clone()).is_err() {
                    // The writer stopped on an error: it is returned below.
                    break;
                }
                if let Some(why) = protocol::count(&mut tally, observer, d.settings, &s) {
                    tally.stopped = Some(why);
                    stopping = true;
                }
                if d.timing.mode == ReplayTiming::PerSession {
                    if let Some(p) = sessions[session_of[pos]].pop_front() {
                        let think = d.timing.gap(todo[p].think_ms.unwrap_or(0.0));
                        due.push(Reverse((key(answered_ms + think), p)));
                    }
                }
            }
        }
    }
    drop(lines);
    written.join().unwrap_or_else(|_| {
        Err(RecordError::Io {
            path: String::new(),
            cause: std::io::Error::other("the results writer thread panicked"),
        })
    })?;
    observer.finish();
    Ok(tally)
}

/// The requests due first (every one in open loop, each session's first per session) by due
/// time in µs after the start, then trace position; and each request's session.
fn first_due(
    sessions: &mut [VecDeque<usize>],
    offsets: &[f64],
    mode: ReplayTiming,
) -> (BinaryHeap<Reverse<(u64, usize)>>, Vec<usize>) {
    let key = |ms: f64| (ms * 1000.0).round().max(0.0) as u64;
    let mut due: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut session_of = vec![0usize; offsets.len()];
    for (k, s) in sessions.iter().enumerate() {
        for &p in s {
            session_of[p] = k;
        }
    }
    match mode {
        ReplayTiming::OpenLoop => {
            due.extend((0..offsets.len()).map(|p| Reverse((key(offsets[p]), p))))
        }
        ReplayTiming::PerSession => {
            for s in sessions.iter_mut() {
                if let Some(p) = s.pop_front() {
                    due.push(Reverse((key(offsets[p]), p)));
                }
            }
        }
    }
    (due, session_of)
}

/// A thread that appends and syncs each sample sent to it (its own handle on the results
/// file, in append mode); it ends, with the first error, when the sender is dropped.
fn spawn_writer(writer: &ResultsWriter) -> Result<(LineSender, WriterThread), RecordError> {
    let mut w = ResultsWriter::append_to(writer.path())?;
    let (tx, rx) = std::sync::mpsc::channel::<Sample>();
    let handle = std::thread::spawn(move || {
        for s in rx {
            w.sample(&s)?;
        }
        Ok(())
    });
    Ok((tx, handle))
}

/// The flush before the first request, where the server allows it: the server's own, and
/// behind a router each worker's (a router's fan-out flush does not reach llama.cpp slots).
async fn first_flush(d: &Driver<'_>) -> Option<Result<String, ClientError>> {
    let own = protocol::flush(d.backend, d.settings).await;
    let Some(f) = d.settings.fleet.as_ref().filter(|_| d.settings.fleet_flush) else {
        return own;
    };
    let workers: Vec<String> = f
        .flush()
        .await
        .iter()
        .map(|w| format!("{}: {}", w.worker, w.detail))
        .collect();
    let each = format!("each worker flushed ({})", workers.join("; "));
    Some(match own {
        Some(Ok(o)) => Ok(format!("{o}; {each}")),
        _ => Ok(each),
    })
}

/// Sleeps until `at` (or forever): the scheduler's coarse wake-up, [`clock::TIMER_SLACK`] before the
/// first due request.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Builds and prepares one request, waits for its due instant `at`, and sends it; the sent
/// instant is taken right before the request leaves, so lateness counts whatever the
/// client still had to do after the due time.
async fn send<'a>(
    d: &'a Driver<'a>,
    r: &'a TraceRequest,
    (pos, due_ms, at): (usize, f64, Instant),
    expectation: Expectation,
    start: Instant,
    (sent_before, in_flight_at_send): (u64, usize),
) -> Done {
    let prompt = d.prompts.build(r);
    let sent_tokens = prompt.len() as u64;
    let mut req = GenRequest {
        prompt,
        prepared: None,
        max_tokens: u32::try_from(r.output_tokens).unwrap_or(u32::MAX),
        cache_bypass: d.settings.cache_bypass,
        timeouts: d.settings.timeouts_for(r.input_tokens),
    };
    let prepared = d.backend.prepare(&mut req).await;
    let fleet = d.settings.fleet.as_ref();
    let before = match fleet {
        Some(f) => Some(f.read().await),
        None => None,
    };
    clock::wait_until(at).await;
    let sent = Instant::now();
    let at = now();
    let result = match prepared {
        Ok(()) => tokio::select! {
            r = d.backend.generate(&req) => r,
            e = watch_server(d.backend) => Err(e),
        },
        Err(e) => Err(e),
    };
    let workers = match (fleet, before) {
        (Some(f), Some(b)) => Some((b, f.read().await)),
        _ => None,
    };
    Done {
        workers,
        sent_before,
        in_flight_at_send,
        pos,
        due_ms,
        sent_ms: sent.duration_since(start).as_secs_f64() * 1000.0,
        at,
        sent_tokens,
        expectation,
        result,
    }
}

/// The sample of an answered request, its reuse judged, and the ledger told what it holds.
fn sample(
    d: &Driver<'_>,
    r: &TraceRequest,
    done: Done,
    answered_ms: f64,
    alone: bool,
    ledger: &mut Ledger,
) -> Sample {
    let worker = match (&d.settings.fleet, &done.workers) {
        (Some(f), Some((before, after))) if alone => {
            let generated = done
                .result
                .as_ref()
                .ok()
                .and_then(|o| o.counts.completion_tokens);
            crate::fleet::judge(&f.urls(), before, after, 1, generated).served_by
        }
        _ => None,
    };
    let target = Target {
        run_id: &d.settings.run_id,
        tolerance: d.settings.tolerance_for(r.input_tokens),
        output_tokens: u32::try_from(r.output_tokens).unwrap_or(u32::MAX),
        nonce_end: None,
    };
    let mut s = make_sample(
        &target,
        r.input_tokens,
        r.turn,
        done.sent_tokens,
        done.at,
        done.result,
    );
    s.phase = Phase::Replay;
    // The cold rule's prefill rate assumes nothing was cached; the report reads TTFT
    // against the uncached tokens instead.
    s.prefill_tokens_per_s = None;
    let mut info = ReplayInfo {
        index: r.index,
        session: r.session.clone(),
        turn: r.turn,
        scheduled_ms: done.due_ms,
        sent_ms: done.sent_ms,
        lateness_ms: done.sent_ms - done.due_ms,
        input_tokens: r.input_tokens,
        output_tokens: r.output_tokens,
        worker,
        ..Default::default()
    };
    let mut exp = done.expectation;
    ledger.pressure(&mut exp);
    let allowance = (d.allowance)(exp.shared);
    proof::judge(&mut s, &mut info, &exp, allowance, d.capacity);
    if s.status == ctxbench_schema::record::Status::Ok {
        let prompt = s.prompt_tokens.unwrap_or(r.input_tokens);
        let counts = (
            prompt,
            s.cached_tokens.unwrap_or(0),
            s.output_tokens.unwrap_or(0),
        );
        ledger.answered(r, answered_ms, counts, info.worker.as_deref());
    }
    s.replay = Some(info);
    s
}

/// Indices already recorded in `prior` (a resumed run's samples).
pub fn recorded(prior: &[Sample]) -> HashSet<u64> {
    prior
        .iter()
        .filter_map(|s| s.replay.as_ref().map(|r| r.index))
        .collect()
}

/// Distinct sessions of a trace (a request without one counts as its own).
pub fn session_count(requests: &[TraceRequest]) -> u64 {
    let refs: Vec<&TraceRequest> = requests.iter().collect();
    schedule::sessions(&refs).len() as u64
}
