//! The concurrency grid (`--concurrency`): at each context and concurrency c, waves of c
//! cold requests of exactly that length, each with its own nonce, released together from
//! one t0; repetitions repeat the whole wave. Each wave is recorded when it is complete, so
//! `--resume` re-measures a wave cut short and skips the recorded ones.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant as StdInstant;

use futures_util::future::join_all;
use tokio::time::Instant;

use super::protocol::{
    before_sample, flush, gone_error, note_flush, now, record, scrape, server_busy_ms, watch_server,
};
use super::{point_record, BenchSettings, Tally};
use crate::adaptive::{Decide, PointProgress};
use crate::costmodel::{CostModel, Observation};
use crate::prompt::PromptBuilder;
use crate::sample::make_sample;
use ctxbench_client::{Backend, GenRequest};
use ctxbench_schema::error::{ClientError, RecordError};
use ctxbench_schema::record::{ErrorKind, Line, Phase, Sample, Status};
use ctxbench_stats::capacity::{analyse_wave, apply_wave, Fit, Limits, RequestTimes};

/// Samples of a cell recorded earlier (resume), grouped by wave.
fn prior_waves(prior: &[Sample], context: u64, c: u32) -> BTreeMap<u32, Vec<&Sample>> {
    let mut by: BTreeMap<u32, Vec<&Sample>> = BTreeMap::new();
    for s in prior.iter().filter(|s| {
        s.context_tokens == context && s.concurrency.unwrap_or(1) == c && s.phase == Phase::Cold
    }) {
        by.entry(s.wave.unwrap_or(s.rep)).or_default().push(s);
    }
    by
}

/// A wave counts as recorded when all its c requests completed.
fn wave_done(samples: &[&Sample], c: u32) -> bool {
    samples.iter().filter(|s| s.status == Status::Ok).count() >= c as usize
}

/// Counts a wave in a cell's progress: one repetition; its requests' TTFTs and its
/// aggregate decode rate (what the adaptive policy's precision is about).
fn add_wave(prog: &mut PointProgress, wave: &[&Sample], secs: f64, min_reps: u32) {
    prog.add_rep(secs, min_reps);
    let usable: Vec<&&Sample> = wave.iter().filter(|s| s.usable()).collect();
    prog.ttft_ms.extend(usable.iter().filter_map(|s| s.ttft_ms));
    if let Some(w) = usable.iter().find_map(|s| s.wave_stats.as_ref()) {
        prog.decode.extend(
            w.aggregate_decode_tokens_per_s
                .or(w.wave_output_tokens_per_s),
        );
    }
}

/// How long the server was busy with a wave: the union of its requests' busy intervals
/// (prompt start to last token, from the server's own prompt and generation times placed at
/// the client's first-token time). Summing the requests would count overlap c times.
fn wave_busy_ms(samples: &[Sample]) -> f64 {
    let mut iv: Vec<(f64, f64)> = samples
        .iter()
        .filter_map(|s| {
            let w = s.wave_stats.as_ref()?;
            let t = s.server.as_ref()?;
            let first = w.first_token_ms?;
            Some((
                first - t.prompt_ms.unwrap_or(0.0),
                first + t.predicted_ms.unwrap_or(0.0),
            ))
        })
        .collect();
    iv.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut total, mut cur): (f64, Option<(f64, f64)>) = (0.0, None);
    for (a, b) in iv {
        cur = match cur {
            Some((ca, cb)) if a <= cb => Some((ca, cb.max(b))),
            Some((ca, cb)) => {
                total += cb - ca;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    total + cur.map_or(0.0, |(a, b)| b - a)
}

/// Measures every cell of contexts × `levels`, small first, with the repetitions the
/// policy asks for, skipping waves already in `prior`. A cell the server's `limits` say
/// cannot run at once is measured anyway (waiting is a finding), with a warning naming the
/// limit and the flag that raises it.
// One loop over cells and waves, like `bench::run`: its stop rules, resume and cost model
// read as one piece; the work of each wave is in `measure_wave`.
pub async fn run_grid(
    ctx: super::RunCtx<'_>,
    contexts: &[u64],
    levels: &[u32],
    limits: &Limits,
    prior: &[Sample],
) -> Result<Tally, RecordError> {
    let super::RunCtx {
        backend,
        builder,
        settings,
        writer,
        observer,
        interrupt,
    } = ctx;
    let mut tally = Tally::default();
    let policy = settings.policy;
    let min_reps = policy.min_reps.max(1);
    let planned;
    (planned, tally.skipped) = planned_requests(contexts, levels, prior, min_reps);
    observer.start(planned, tally.skipped);
    let run_start = Instant::now();
    let mut observations: Vec<Observation> = Vec::new();
    let mut nonce = prior.len() as u64;
    let smallest = levels.iter().copied().min().unwrap_or(1);
    'cells: for (pi, &context) in contexts.iter().enumerate() {
        for (ci, &c) in levels.iter().enumerate() {
            let (done, mut prog) = prior_cell(prior, (context, c), min_reps);
            if let Fit::Queues(why) = limits.predict(context, settings.output_tokens, c) {
                observer.warn(&format!(
                    "{} × {c}: {why}; measured anyway (waiting is a finding)",
                    ctxbench_schema::units::fmt_ctx(context)
                ));
            }
            let mut next_wave = 0u32;
            loop {
                let model = CostModel::new(observations.clone());
                let cost = model.request_s(context as f64, settings.output_tokens);
                if let Err(reason) = policy.next(&prog, run_start.elapsed().as_secs_f64(), cost) {
                    let mut rec = point_record(settings, context, &prog, reason);
                    rec.concurrency = Some(c);
                    writer.append(&Line::Point(Box::new(rec.clone())))?;
                    observer.point_done(&rec);
                    break;
                }
                if *interrupt.borrow() {
                    tally.interrupted = true;
                    break 'cells;
                }
                while done.contains(&next_wave) {
                    next_wave += 1;
                }
                let wave = next_wave;
                next_wave += 1;
                observer.eta(remaining_s(
                    &model,
                    contexts,
                    levels,
                    (pi, ci),
                    &prog,
                    settings,
                ));
                observer.sample_started(context, wave);
                // The last request of a wave may wait for all c requests' work: a server
                // that gains nothing from batching (compute-bound, as on a CPU) runs them in
                // series, and rounds of slots do not shorten that. A 16k × 8 wave on the
                // reference server timed out under the per-round estimate.
                let timeouts =
                    settings.timeouts_with_prediction(context, cost.map(|s| s * f64::from(c)));
                let started = Instant::now();
                let req = WaveRequest {
                    context,
                    c,
                    wave,
                    nonce,
                    timeouts,
                };
                // A wave is one measurement: the server must be idle before all c of its
                // requests go out, as before a single sample.
                let waited = tokio::select! {
                    w = before_sample(settings.idle.as_ref(), &mut *observer, context, wave) => w,
                    _ = interrupt.wait_for(|v| *v) => {
                        tally.interrupted = true;
                        break 'cells;
                    }
                };
                let Some(mut samples) =
                    measure_wave(backend, builder, settings, interrupt, req, waited).await
                else {
                    tally.interrupted = true;
                    break 'cells;
                };
                nonce += u64::from(c);
                let secs = started.elapsed().as_secs_f64();
                let refs: Vec<&Sample> = samples.iter().collect();
                add_wave(&mut prog, &refs, secs, min_reps);
                if c == smallest {
                    observe(&mut observations, context, &prog, &samples);
                }
                let stop = record_wave(
                    backend,
                    (writer, &mut tally, observer, settings),
                    &mut samples,
                )
                .await?;
                if let Some(reason) = stop {
                    tally.stopped = Some(reason);
                    break 'cells;
                }
            }
        }
    }
    observer.finish();
    Ok(tally)
}

/// A cell's wave ids already taken and its progress from the waves recorded by earlier
/// sessions (resume). Every recorded wave id is taken, complete or not: a wave cut short
/// (killed between its lines) is measured again under a new id, not mixed with the old.
fn prior_cell(
    prior: &[Sample],
    (context, c): (u64, u32),
    min_reps: u32,
) -> (HashSet<u32>, PointProgress) {
    let earlier = prior_waves(prior, context, c);
    let done: HashSet<u32> = earlier.keys().copied().collect();
    let mut prog = PointProgress::default();
    for w in earlier.values().filter(|w| wave_done(w, c)) {
        let secs = w.iter().filter_map(|s| s.e2e_ms).fold(0.0, f64::max) / 1000.0;
        add_wave(&mut prog, w, secs, min_reps);
    }
    (done, prog)
}

/// Requests still to measure and requests already recorded (resume), over every cell.
fn planned_requests(
    contexts: &[u64],
    levels: &[u32],
    prior: &[Sample],
    min_reps: u32,
) -> (usize, usize) {
    let (mut planned, mut skipped) = (0usize, 0usize);
    for &ctx in contexts {
        for &c in levels {
            let done = prior_waves(prior, ctx, c)
                .values()
                .filter(|w| wave_done(w, c))
                .count();
            skipped += done * c as usize;
            planned += (min_reps as usize).saturating_sub(done) * c as usize;
        }
    }
    (planned, skipped)
}

/// The cost model's data from the smallest level's waves: median TTFT and step time at
/// `context` so far.
fn observe(
    observations: &mut Vec<Observation>,
    context: u64,
    prog: &PointProgress,
    samples: &[Sample],
) {
    let med = |v: Vec<f64>| ctxbench_stats::stats::Spread::of(v).map(|s| s.median);
    let steps = samples
        .iter()
        .filter(|s| s.usable())
        .filter_map(|s| s.wave_stats.as_ref().and_then(|w| w.window_ms_per_step));
    if let (Some(t), Some(st)) = (med(prog.ttft_ms.clone()), med(steps.collect())) {
        observations.retain(|o| o.context != context as f64);
        observations.push(Observation {
            context: context as f64,
            ttft_s: t / 1000.0,
            step_s: st / 1000.0,
        });
    }
}

/// Records a wave's samples (the wave's server time counted once, not per request) and
/// says why the grid must stop, if it must: a stop asked for by a sample, or a server gone.
async fn record_wave(
    backend: &dyn Backend,
    (writer, tally, observer, settings): (
        &mut ctxbench_schema::record::ResultsWriter,
        &mut Tally,
        &mut dyn super::Observer,
        &BenchSettings,
    ),
    samples: &mut [Sample],
) -> Result<Option<String>, RecordError> {
    let server_gone = samples.iter().any(|s| {
        s.error
            .as_ref()
            .is_some_and(|e| e.kind == ErrorKind::Transport)
    }) && !backend.reachable().await;
    let summed: f64 = samples.iter().map(server_busy_ms).sum();
    let busy = wave_busy_ms(samples);
    let mut stop = None;
    for s in samples.iter_mut() {
        if let Some(reason) = record(writer, tally, observer, settings, s)? {
            stop.get_or_insert(reason);
        }
    }
    tally.server_busy_ms += busy - summed;
    if server_gone && stop.is_none() {
        stop = samples
            .iter()
            .find_map(|s| s.error.as_ref().map(|e| e.message.clone()));
    }
    Ok(stop)
}

/// Flags every completed request of a wave as preempted when the server's preemption
/// counter rose during it: the counter is server-wide, so it cannot say which request was
/// redone.
fn flag_preemptions(samples: &mut [Sample], d: &std::collections::BTreeMap<String, f64>) {
    let preempted =
        |v: &dyn ctxbench_client::MetricsVocabulary| v.preemptions(d).is_some_and(|n| n > 0.0);
    if ctxbench_client::metrics_vocabularies().any(preempted) {
        for s in samples.iter_mut().filter(|s| s.status == Status::Ok) {
            if !s.has(&ctxbench_schema::record::Flag::Preempted) {
                s.flags.push(ctxbench_schema::record::Flag::Preempted);
            }
        }
    }
}

/// Predicted seconds left in the grid: a wave costs c requests' work. That is exact for a
/// server that gains nothing from batching (compute-bound, as on CPU: the reference server's
/// 1k–16k × 1,2,4,8 grid took 279 s where one request's cost per round of slots predicted
/// 47 s); a server that batches well finishes sooner, so this is an upper estimate.
fn remaining_s(
    model: &CostModel,
    contexts: &[u64],
    levels: &[u32],
    (pi, ci): (usize, usize),
    prog: &PointProgress,
    settings: &BenchSettings,
) -> Option<f64> {
    let reps = settings.policy.min_reps.max(1);
    let mut total = 0.0;
    for (i, &ctx) in contexts.iter().enumerate().skip(pi) {
        for (j, &c) in levels.iter().enumerate() {
            if i == pi && j < ci {
                continue;
            }
            let n = match (i, j) == (pi, ci) {
                true => reps.saturating_sub(prog.reps).max(1),
                false => reps,
            };
            let per = model.request_s(ctx as f64, settings.output_tokens)? * f64::from(c);
            total += per * n as f64;
        }
    }
    Some(total)
}

/// The predicted seconds of a whole grid from a cost model (the dry run's estimate).
pub fn predicted_grid_s(
    model: &CostModel,
    contexts: &[u64],
    levels: &[u32],
    settings: &BenchSettings,
) -> Option<f64> {
    remaining_s(
        model,
        contexts,
        levels,
        (0, 0),
        &PointProgress::default(),
        settings,
    )
}

/// One wave to measure: its point, its size, its index and its prompts' first window.
pub(super) struct WaveRequest {
    pub context: u64,
    pub c: u32,
    pub wave: u32,
    pub nonce: u64,
    pub timeouts: ctxbench_client::Timeouts,
}

/// One cold wave: c prompts, each with its own nonce, all prepared (text built, lengths
/// calibrated) before the flush and t0, then released together; the cache flushed once
/// before it. `None` when interrupted (nothing of it is recorded). A request whose prompt
/// cannot be prepared is a failed sample; the others are released without it.
pub(super) async fn measure_wave(
    backend: &dyn Backend,
    builder: &mut PromptBuilder,
    settings: &BenchSettings,
    interrupt: &mut tokio::sync::watch::Receiver<bool>,
    req: WaveRequest,
    waited: Option<crate::idle::Waited>,
) -> Option<Vec<Sample>> {
    let WaveRequest {
        context,
        c,
        wave,
        nonce,
        timeouts,
    } = req;
    let mut reqs: Vec<GenRequest> = (0..c)
        .map(|i| GenRequest {
            prompt: builder.build(context, nonce + u64::from(i)),
            prepared: None,
            max_tokens: settings.output_tokens,
            cache_bypass: settings.cache_bypass,
            timeouts,
        })
        .collect();
    let prepared = prepare_wave(backend, interrupt, &mut reqs).await?;
    // Nothing to flush for when no request can be sent (the server went away).
    let flushed = match prepared.iter().any(Result::is_ok) {
        true => flush(backend, settings).await,
        false => None,
    };
    // Behind a router: every worker idle and flushed, its counters read, before the wave.
    let fleet_before = match &settings.fleet {
        Some(f) => {
            let (states, _, _) = f.wait_idle().await;
            let flushed = match settings.fleet_flush {
                true => f.flush().await,
                false => Vec::new(),
            };
            Some((states, flushed))
        }
        None => None,
    };
    // /metrics around the wave: where a server that flags no request counts preemptions.
    let before = scrape(settings).await;
    let mut samples = release(
        backend,
        settings,
        interrupt,
        (&reqs, prepared),
        (context, wave),
    )
    .await?;
    let deltas = wave_deltas(settings, &mut samples, before).await;
    if let Some(d) = &deltas {
        // The wave's prefix-cache counters: no hit among c prompts proves each cold; a hit
        // cannot be placed, so every request of the wave is contaminated (a false alarm at
        // worst, never a missed hit). Speculative and other deltas stay unattributed.
        for s in samples
            .iter_mut()
            .filter(|s| s.status == Status::Ok && s.phase == Phase::Cold)
        {
            crate::sample::apply_cache_evidence(s, d);
        }
    }
    if let Some(s) = samples.first_mut() {
        note_flush(s, flushed);
    }
    check_wave_idle(settings, &mut samples, waited, deltas.as_ref()).await;
    if let (Some(f), Some(b)) = (&settings.fleet, fleet_before) {
        fleet_wave(f, &mut samples, b, settings.output_tokens).await;
    }
    Some(samples)
}

/// Behind a router: records how the wave's requests spread over the workers (on every sample
/// of it) and each worker's flush (on the first); more requests served than the wave's
/// completed ones is others' work, which flags every sample of it.
async fn fleet_wave(
    fleet: &crate::fleet::Fleet,
    samples: &mut [Sample],
    (before, flushed): (
        Vec<crate::fleet::WorkerState>,
        Vec<ctxbench_schema::record::WorkerFlush>,
    ),
    output_tokens: u32,
) {
    let after = fleet.read().await;
    let spread =
        crate::fleet::wave_spread(&fleet.urls(), &before, &after, u64::from(output_tokens));
    let served: u64 = spread.values().sum();
    let ok = samples.iter().filter(|s| s.status == Status::Ok).count() as u64;
    let words: Vec<String> = spread.iter().map(|(w, n)| format!("{w} {n}")).collect();
    let how = format!(
        "wave of {}: requests per worker {}",
        samples.len(),
        words.join(", ")
    );
    for (i, s) in samples.iter_mut().enumerate() {
        if fleet.check && served > ok && s.status == Status::Ok {
            if !s.has(&ctxbench_schema::record::Flag::ForeignLoad) {
                s.flags.push(ctxbench_schema::record::Flag::ForeignLoad);
            }
            s.foreign_load = Some(format!(
                "the workers served {served} request(s) during a wave of {ok} completed: {}",
                words.join(", ")
            ));
        }
        s.fleet = Some(ctxbench_schema::record::FleetSample {
            served_by: None,
            how: how.clone(),
            flush: if i == 0 { flushed.clone() } else { Vec::new() },
            wave_spread: spread.clone(),
        });
    }
}

/// Prepares a wave's requests, stopping for an interrupt (`None`); a server gone away
/// fails every request.
pub(super) async fn prepare_wave(
    backend: &dyn Backend,
    interrupt: &mut tokio::sync::watch::Receiver<bool>,
    reqs: &mut [GenRequest],
) -> Option<Vec<Result<(), ClientError>>> {
    let c = reqs.len();
    tokio::select! {
        r = prepare_all(backend, reqs) => Some(r),
        e = watch_server(backend) => {
            let mut v = vec![Err(e)];
            v.extend((1..c).map(|_| Err(gone_error(backend))));
            Some(v)
        }
        _ = interrupt.wait_for(|v| *v) => None,
    }
}

/// Releases prepared requests together from one t0 and makes their samples (rep = wave,
/// wave statistics applied). `None` when interrupted.
pub(super) async fn release(
    backend: &dyn Backend,
    settings: &BenchSettings,
    interrupt: &mut tokio::sync::watch::Receiver<bool>,
    (reqs, prepared): (&[GenRequest], Vec<Result<(), ClientError>>),
    (context, wave): (u64, u32),
) -> Option<Vec<Sample>> {
    let c = reqs.len();
    let at = now();
    // One t0 for the wave: every prepared request is first polled (and written) right
    // after it; one that could not be prepared keeps its error and sends nothing.
    let t0 = StdInstant::now();
    let all = join_all(reqs.iter().zip(prepared).map(|(r, p)| async move {
        p?;
        backend.generate(r).await
    }));
    let results: Vec<Result<ctxbench_client::GenOutcome, ClientError>> = tokio::select! {
        r = all => r,
        _ = watch_server(backend) => (0..c).map(|_| Err(gone_error(backend))).collect(),
        _ = interrupt.wait_for(|v| *v) => return None,
    };
    let ms = |t: StdInstant| t.saturating_duration_since(t0).as_secs_f64() * 1000.0;
    let times: Vec<RequestTimes> = results
        .iter()
        .map(|r| match r {
            Ok(o) => RequestTimes {
                sent_ms: ms(o.stream.t_sent),
                token_ms: o.stream.token_times.iter().map(|&t| ms(t)).collect(),
            },
            Err(_) => RequestTimes::default(),
        })
        .collect();
    let mut samples: Vec<Sample> = results
        .into_iter()
        .zip(reqs)
        .map(|(r, req)| {
            make_sample(
                &settings.target(context),
                context,
                wave,
                req.prompt.len() as u64,
                at.clone(),
                r,
            )
        })
        .collect();
    apply_wave(&mut samples, analyse_wave(context, &times), c as u32, wave);
    Some(samples)
}

/// The /metrics deltas across a wave (`None` without a scraper), with its preemptions
/// flagged on every completed request.
pub(super) async fn wave_deltas(
    settings: &BenchSettings,
    samples: &mut [Sample],
    before: Option<ctxbench_client::metrics::Snapshot>,
) -> Option<std::collections::BTreeMap<String, f64>> {
    let (b, a) = (before?, scrape(settings).await?);
    let d = ctxbench_client::metrics::deltas(&b, &a, &ctxbench_client::kept_metric_names());
    flag_preemptions(samples, &d);
    Some(d)
}

/// The idle check after a wave: the c requests are one measurement, so the counters and
/// slots must account for all of them together; foreign work flags every request of it.
pub(super) async fn check_wave_idle(
    settings: &BenchSettings,
    samples: &mut [Sample],
    waited: Option<crate::idle::Waited>,
    deltas: Option<&std::collections::BTreeMap<String, f64>>,
) {
    let (Some(check), Some(w)) = (settings.idle.as_ref(), waited) else {
        return;
    };
    let waited_ms = w.waited.as_secs_f64() * 1000.0;
    // A failed request's server may be going away: nothing more is read (as for a sample).
    let all_ok = samples.iter().all(|s| s.status == Status::Ok);
    let mut why = Vec::new();
    if all_ok {
        if w.expired {
            why.push(format!(
                "the server was still busy ({} request(s)) when --idle-wait {} s ran out",
                w.before.as_ref().map_or(0, |r| r.active),
                check.wait.as_secs_f64()
            ));
        }
        let generated = samples.iter().map(|s| s.output_tokens).sum::<Option<u64>>();
        let served =
            deltas.and_then(|d| ctxbench_client::metrics_vocabularies().find_map(|v| v.served(d)));
        why.extend(
            check
                .after(w.before.as_ref(), samples.len() as u64, generated, served)
                .await,
        );
    }
    for s in samples.iter_mut() {
        if check.source().is_some() {
            s.idle_wait_ms = Some(waited_ms);
        }
        if w.expired && all_ok {
            s.flags.push(ctxbench_schema::record::Flag::IdleWaitExpired);
        }
        if !why.is_empty() {
            s.flags.push(ctxbench_schema::record::Flag::ForeignLoad);
            s.foreign_load = Some(why.join("; "));
        }
    }
}

/// Prepares every request of a wave: the first alone, so a new length is calibrated once
/// and the others reuse it, then the rest at once (tokenizer round-trips in parallel).
async fn prepare_all(
    backend: &dyn Backend,
    reqs: &mut [GenRequest],
) -> Vec<Result<(), ClientError>> {
    let Some((first, rest)) = reqs.split_first_mut() else {
        return Vec::new();
    };
    let mut out = vec![backend.prepare(first).await];
    out.extend(join_all(rest.iter_mut().map(|r| backend.prepare(r))).await);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::costmodel::Observation;

    #[test]
    fn a_preemption_counted_during_a_wave_flags_its_completed_requests() {
        let failed = Sample {
            status: Status::Failed,
            ..Sample::default()
        };
        let mut samples = vec![Sample::default(), Sample::default(), failed];
        let d = |n: f64| {
            std::collections::BTreeMap::from([("vllm:num_preemptions_total".to_owned(), n)])
        };
        flag_preemptions(&mut samples, &d(0.0));
        assert!(samples.iter().all(|s| s.flags.is_empty()));
        flag_preemptions(&mut samples, &d(1.0));
        flag_preemptions(&mut samples, &d(1.0));
        let flagged: Vec<usize> = samples
            .iter()
            .map(|s| {
                s.flags
                    .iter()
                    .filter(|f| **f == ctxbench_schema::record::Flag::Preempted)
                    .count()
            })
            .collect();
        assert_eq!(flagged, vec![1, 1, 0]);
    }

    #[test]
    fn a_waves_cache_counters_prove_every_request_cold_or_contaminate_them_all() {
        let unverified = || {
            let mut s = Sample {
                prompt_tokens: Some(1024),
                ..Sample::default()
            };
            s.flags.push(ctxbench_schema::record::Flag::CacheUnverified);
            s
        };
        let d = |hits: f64| {
            std::collections::BTreeMap::from([
                ("vllm:prefix_cache_hits_total".to_owned(), hits),
                ("vllm:prefix_cache_queries_total".to_owned(), 2048.0),
            ])
        };
        for (hits, cold) in [(0.0, true), (512.0, false)] {
            let mut samples = vec![unverified(), unverified()];
            for s in &mut samples {
                crate::sample::apply_cache_evidence(s, &d(hits));
            }
            for s in &samples {
                assert!(s.cache_verified, "{s:?}");
                assert_eq!(s.contaminated, !cold, "{s:?}");
                assert_eq!(s.cached_tokens, Some(hits as u64));
                assert!(!s.has(&ctxbench_schema::record::Flag::CacheUnverified));
            }
        }
    }

    #[test]
    fn a_grid_estimate_counts_each_wave_as_c_requests_work() {
        // One request: 1 s of prefill + 9 steps of 0.1 s = 1.9 s at every length here.
        let model = CostModel::new(vec![
            Observation {
                context: 1024.0,
                ttft_s: 1.0,
                step_s: 0.1,
            },
            Observation {
                context: 2048.0,
                ttft_s: 1.0,
                step_s: 0.1,
            },
        ]);
        let mut settings = crate::bench::tests::settings();
        settings.output_tokens = 10;
        settings.policy.min_reps = 2;
        let total = predicted_grid_s(&model, &[1024, 2048], &[1, 2, 4], &settings)
            .expect("a model with two points predicts");
        // 2 contexts × 2 reps × (1 + 2 + 4) requests × 1.9 s; per round of slots it was 2 × 2 × 3.
        assert!((total - 2.0 * 2.0 * 7.0 * 1.9).abs() < 1e-9, "{total}");
    }
}
