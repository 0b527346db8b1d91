//! The measuring protocol, written once. Every measured request (cold, two-point, decode at
//! depth, needle, prime, append, tier) goes through the same named steps, in this order:
//!
//! 1. [`before`]: wait for an idle server (the idle guard), scrape the metrics, flush (when
//!    the mode measures cold; a warm mode keeps the cache on purpose);
//! 2. [`send`]: the request, watched for a server that dies and for the user's interrupt;
//! 3. the mode's own judgement: its sample maker (`crate::sample`), the warm rule, the
//!    needle check;
//! 4. [`after`]: note the flush, scrape the metrics again and keep the deltas, check that no
//!    foreign work overlapped (`foreign_load`);
//! 5. [`record`]: write the line (synced) and count it.
//!
//! The modes differ in what they send and how they judge, not in a copy of this sequence.
//! A concurrency wave (`bench::wave::measure_wave`) takes the same steps once around its c
//! requests, from the same pieces (`before_sample`, `flush`, `scrape`, `note_flush`), with an
//! after-step of its own: one scrape's deltas and one idle check judge the whole wave.

use std::time::Duration;

// tokio's clock, so the loop's budgets can be tested on a paused clock.
use tokio::time::Instant;

use super::ctx::{BenchSettings, Observer, OnError, RunCtx, Tally};
use crate::idle::{IdleCheck, Waited};
use crate::sample::apply_metric_deltas;
use ctxbench_client::metrics;
use ctxbench_client::{Backend, GenOutcome, GenRequest};
use ctxbench_schema::error::{ClientError, RecordError};
use ctxbench_schema::record::{ErrorKind, Flag, ResultsWriter, Sample, ServerTimings};

/// What the steps before a request found, for the steps after it.
pub struct Before {
    /// The idle guard's wait (`None` without a check).
    waited: Option<Waited>,
    /// The metrics scraped before (`None` without `--metrics` or when the scrape failed).
    metrics: Option<metrics::Snapshot>,
    /// The flush's outcome (`None`: no flush asked for).
    flushed: Option<Result<String, ClientError>>,
    /// Behind a router: the workers' states the sample starts from, and each worker's flush.
    fleet: Option<FleetBefore>,
}

/// Behind a router: the workers' states a sample starts from, each worker's flush, how long
/// the wait for all to be idle took and whether it ran out.
type FleetBefore = (
    Vec<crate::fleet::WorkerState>,
    Vec<ctxbench_schema::record::WorkerFlush>,
    Duration,
    bool,
);

impl Before {
    /// The flush's outcome alone, for a request that ended before step 4 could run.
    pub fn into_flushed(self) -> Option<Result<String, ClientError>> {
        self.flushed
    }
}

/// Step 1: waits for an idle server, scrapes the metrics and, when `cold`, flushes the
/// cache. `None` when the user interrupted the wait.
pub async fn before(
    ctx: &mut RunCtx<'_>,
    (context, rep): (u64, u32),
    cold: bool,
) -> Option<Before> {
    let settings = ctx.settings;
    let waited = tokio::select! {
        w = before_sample(settings.idle.as_ref(), &mut *ctx.observer, context, rep) => w,
        _ = ctx.interrupt.wait_for(|v| *v) => return None,
    };
    let metrics = scrape(settings).await;
    let flushed = match cold {
        true => flush(ctx.backend, settings).await,
        false => None,
    };
    let fleet = match &settings.fleet {
        Some(f) => {
            let (states, waited, expired) = tokio::select! {
                w = f.wait_idle() => w,
                _ = ctx.interrupt.wait_for(|v| *v) => return None,
            };
            let flushed = match cold && settings.fleet_flush {
                true => f.flush().await,
                false => Vec::new(),
            };
            Some((states, flushed, waited, expired))
        }
        None => None,
    };
    Some(Before {
        waited,
        metrics,
        flushed,
        fleet,
    })
}

/// Step 2: sends one measured request; `None` when the user interrupted it, an error
/// when the server stopped listening while it was in flight.
pub async fn send(
    backend: &dyn Backend,
    req: &GenRequest,
    interrupt: &mut tokio::sync::watch::Receiver<bool>,
) -> Option<Result<GenOutcome, ClientError>> {
    tokio::select! {
        r = backend.generate(req) => Some(r),
        e = watch_server(backend) => Some(Err(e)),
        _ = interrupt.wait_for(|v| *v) => None,
    }
}

/// Step 4: notes the flush on the sample, keeps the metric deltas since step 1 and flags
/// foreign work that overlapped the `requests` request(s) sent between the two.
pub async fn after(settings: &BenchSettings, s: &mut Sample, before: Before, requests: u64) {
    note_flush(s, before.flushed);
    finish_metrics(settings, Some(&mut *s), before.metrics.as_ref()).await;
    after_sample(settings.idle.as_ref(), s, before.waited, requests).await;
    if let (Some(f), Some(b)) = (&settings.fleet, before.fleet) {
        after_fleet(f, s, b, requests).await;
    }
}

/// Behind a router: reads every worker again, records which one served the sample and each
/// worker's flush, and flags work the sample does not account for (`foreign_load`).
async fn after_fleet(
    fleet: &crate::fleet::Fleet,
    s: &mut Sample,
    (before, flush, waited, expired): FleetBefore,
    requests: u64,
) {
    if fleet.check {
        s.idle_wait_ms = Some(waited.as_secs_f64() * 1000.0);
    }
    let after = fleet.read().await;
    let generated = match &s.two_point {
        Some(t) => Some(t.a_tokens + t.b_tokens),
        None => s.output_tokens,
    };
    let mut j = crate::fleet::judge(&fleet.urls(), &before, &after, requests, generated);
    if expired {
        j.foreign.push(format!(
            "a worker was still busy when --idle-wait {} s ran out",
            fleet.wait.as_secs_f64()
        ));
        s.flags.push(Flag::IdleWaitExpired);
    }
    // A failed request enters no summary; its counters prove nothing about others' work.
    if fleet.check && s.status == ctxbench_schema::record::Status::Ok && !j.foreign.is_empty() {
        if !s.has(&Flag::ForeignLoad) {
            s.flags.push(Flag::ForeignLoad);
        }
        let why = j.foreign.join("; ");
        s.foreign_load = Some(match s.foreign_load.take() {
            Some(w) => format!("{w}; {why}"),
            None => why,
        });
    }
    s.fleet = Some(ctxbench_schema::record::FleetSample {
        served_by: j.served_by,
        how: j.how,
        flush,
        wave_spread: Default::default(),
    });
}

/// Writes one sample and counts it; returns why the sweep must stop, if it must.
pub fn record(
    writer: &mut ResultsWriter,
    tally: &mut Tally,
    observer: &mut dyn Observer,
    settings: &BenchSettings,
    sample: &Sample,
) -> Result<Option<String>, RecordError> {
    writer.sample(sample)?;
    Ok(count(tally, observer, settings, sample))
}

/// Counts a sample already written and tells the observer; returns why the run must stop,
/// if it must (a replay writes on a thread of its own, so its scheduler never waits on a
/// disk sync).
pub fn count(
    tally: &mut Tally,
    observer: &mut dyn Observer,
    settings: &BenchSettings,
    sample: &Sample,
) -> Option<String> {
    tally.recorded += 1;
    tally.contaminated += sample.contaminated as usize;
    tally.server_busy_ms += server_busy_ms(sample);
    observer.sample_done(sample);
    if let Some(e) = &sample.error {
        tally.failed += 1;
        if e.kind == ErrorKind::Timeout && !tally.timeout_told {
            tally.timeout_told = true;
            observer.warn(&after_timeout(settings));
        }
        let fatal = matches!(e.kind, ErrorKind::Connect | ErrorKind::Unauthorized);
        if fatal || settings.on_error == OnError::Stop {
            return Some(e.message.clone());
        }
    }
    None
}

/// What a request the client gave up on leaves behind: the server may still be computing
/// it, so the next sample either waits for the server to be idle or may queue behind it.
pub fn after_timeout(settings: &BenchSettings) -> String {
    let idle = settings
        .idle
        .as_ref()
        .filter(|c| c.source().is_some() && !c.wait.is_zero());
    match idle {
        Some(c) => format!(
            "a request timed out on the client's side; the server may still be computing it: each next sample waits (up to --idle-wait {} s) for the server to read idle before it is sent",
            c.wait.as_secs_f64()
        ),
        None => "a request timed out on the client's side; the server may still be computing it, and ctxbench cannot know when it is idle again (no busy signal read on this server, or --idle-wait 0): the next samples may queue behind it and be slower or time out too; raise --timeout, or give a server that exposes its load (e.g. /metrics)".to_owned(),
    }
}

/// The wall-clock instant a sample is stamped with.
pub fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// The metrics now, when `--metrics` is on and the scrape works.
pub async fn scrape(settings: &BenchSettings) -> Option<metrics::Snapshot> {
    match &settings.metrics {
        Some(m) => m.scrape().await.ok(),
        None => None,
    }
}

/// Flushes when the settings ask for it; `None` when they do not.
pub async fn flush(
    backend: &dyn Backend,
    settings: &BenchSettings,
) -> Option<Result<String, ClientError>> {
    match settings.flush {
        true => Some(flush_when_idle(backend, settings.flush_wait).await),
        false => None,
    }
}

/// How long a flush refused because the server is busy is retried before giving up, by
/// default (`--flush-wait`).
pub const FLUSH_IDLE_WAIT: Duration = Duration::from_secs(120);

/// Flushes; a refusal because the server is busy (another client's request is running)
/// is retried with backoff (0.25 s doubling to 4 s) until it succeeds or `bound` passes,
/// and a flush that had to wait says how long. Any other error is returned at once.
pub async fn flush_when_idle(
    backend: &dyn Backend,
    bound: Duration,
) -> Result<String, ClientError> {
    let start = Instant::now();
    let mut wait = Duration::from_millis(250);
    let mut refused = false;
    loop {
        match backend.flush().await {
            Err(ClientError::Busy { .. }) if start.elapsed() + wait <= bound => {
                refused = true;
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(4));
            }
            Ok(what) if refused => {
                return Ok(format!(
                    "{what} (after {:.1} s waiting for the server to go idle)",
                    start.elapsed().as_secs_f64()
                ))
            }
            r => return r,
        }
    }
}

/// Records a flush's outcome on the sample (`flush_failed` when it failed).
pub fn note_flush(s: &mut Sample, flushed: Option<Result<String, ClientError>>) {
    match flushed {
        Some(Ok(what)) => s.flush = Some(what),
        Some(Err(e)) => {
            s.flush = Some(format!("failed: {e}"));
            s.flags.push(Flag::FlushFailed);
        }
        None => {}
    }
}

/// Scrapes after a sample and stores the deltas since `before`.
pub async fn finish_metrics(
    settings: &BenchSettings,
    s: Option<&mut Sample>,
    before: Option<&metrics::Snapshot>,
) {
    let (Some(m), Some(s)) = (&settings.metrics, s) else {
        return;
    };
    if s.metrics.is_some() {
        return;
    }
    match (before, m.scrape().await) {
        (Some(before), Ok(after)) => apply_metric_deltas(s, before, &after),
        _ => s.flags.push(Flag::MetricsUnavailable),
    }
}

/// Resolves, with the error to record, when the server stops listening while a request is
/// in flight (checked every second by a TCP connect). A server shutting down can hold a
/// request open for its own shutdown timeout (llama-server: 30 s) without a byte; this
/// notices at once that nothing listens any more.
pub async fn watch_server(backend: &dyn Backend) -> ClientError {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if !backend.listening().await {
            return gone_error(backend);
        }
    }
}

/// The error a request records when its server stopped listening.
pub fn gone_error(backend: &dyn Backend) -> ClientError {
    ClientError::Transport {
        endpoint: backend.endpoint().to_owned(),
        detail: "the server stopped accepting connections mid-request".to_owned(),
    }
}

/// Server-reported busy time of a sample (prompt + generation; both requests of a
/// two-point sample), in ms.
pub fn server_busy_ms(s: &Sample) -> f64 {
    let main = s.server.as_ref().map_or(0.0, ServerTimings::busy_ms);
    let a = s
        .two_point
        .as_ref()
        .and_then(|t| t.a_server_busy_ms)
        .unwrap_or(0.0);
    main + a
}

/// Before a measured request: waits for the server to be idle, telling `observer` when it
/// has to wait and when the wait is over. `None` without a check.
pub async fn before_sample(
    check: Option<&IdleCheck>,
    observer: &mut dyn Observer,
    context: u64,
    rep: u32,
) -> Option<Waited> {
    let check = check?;
    let mut waited_for = false;
    let w = check
        .wait_idle(&mut |r| {
            waited_for = true;
            observer.waiting_for_idle(context, rep, r.active);
        })
        .await;
    if waited_for {
        observer.idle_reached(w.waited.as_secs_f64(), w.expired);
    }
    Some(w)
}

/// After a measured request that sent `requests` request(s): records the wait on the
/// sample and flags it `foreign_load` (with the evidence) when the wait ran out or the
/// checks after it show another client's work.
pub async fn after_sample(
    check: Option<&IdleCheck>,
    s: &mut ctxbench_schema::record::Sample,
    waited: Option<Waited>,
    requests: u64,
) {
    use ctxbench_schema::record::Flag;
    let (Some(check), Some(w)) = (check, waited) else {
        return;
    };
    if check.source().is_some() {
        s.idle_wait_ms = Some(w.waited.as_secs_f64() * 1000.0);
    }
    // A failed request enters no summary, and its server may be going away (one shutting
    // down holds open connections silent): nothing more is read.
    if s.status != ctxbench_schema::record::Status::Ok {
        return;
    }
    let generated = match &s.two_point {
        Some(t) => Some(t.a_tokens + t.b_tokens),
        None => s.output_tokens,
    };
    let served = s
        .metrics
        .as_ref()
        .and_then(|d| ctxbench_client::metrics_vocabularies().find_map(|v| v.served(d)));
    let mut why = Vec::new();
    if w.expired {
        s.flags.push(Flag::IdleWaitExpired);
        why.push(format!(
            "the server was still busy ({} request(s)) when --idle-wait {} s ran out",
            w.before.as_ref().map_or(0, |r| r.active),
            check.wait.as_secs_f64()
        ));
    }
    why.extend(
        check
            .after(w.before.as_ref(), requests, generated, served)
            .await,
    );
    if !why.is_empty() {
        s.flags.push(Flag::ForeignLoad);
        s.foreign_load = Some(why.join("; "));
    }
}
