//! What the measuring loop is given and what it gives back: its settings, its observer, the
//! bundle of borrowed parts every mode drives (`RunCtx`), and the tally of how it ended.
//! Below the loop and its protocol, so both can name them without importing each other.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::adaptive::RepPolicy;
use crate::prompt::PromptBuilder;
use crate::sample::Target;
use ctxbench_client::{Backend, Scraper, Timeouts};
use ctxbench_schema::record::{PointRecord, ResultsWriter, Sample};

/// The least time an unmeasured request (warmup, calibration) is allowed.
pub const UNMEASURED_TIMEOUT: Duration = Duration::from_secs(60);

/// Receives events from the measuring loop; the loop does not know who listens (the
/// binary's terminal display is one implementation, tests record events).
pub trait Observer {
    /// The run is about to measure `total` samples (`skipped` already recorded).
    fn start(&mut self, _total: usize, _skipped: usize) {}
    /// A request at `context` is about to be sent.
    fn sample_started(&mut self, _context: u64, _rep: u32) {}
    /// The server is busy with `active` other request(s): ctxbench waits for it to be idle
    /// before measuring (see `crate::idle`).
    fn waiting_for_idle(&mut self, _context: u64, _rep: u32, _active: u64) {}
    /// The wait for idle is over after `waited_s` seconds (`expired`: it ran out, the sample
    /// is measured anyway and flagged).
    fn idle_reached(&mut self, _waited_s: f64, _expired: bool) {}
    /// A sample was recorded.
    fn sample_done(&mut self, _sample: &Sample) {}
    /// Predicted seconds left (from the cost model), when known.
    fn eta(&mut self, _remaining_s: Option<f64>) {}
    /// A context is finished: how many repetitions and why it stopped.
    fn point_done(&mut self, _point: &PointRecord) {}
    /// A warning worth a line of its own (said even when quiet).
    fn warn(&mut self, _msg: &str) {}
    /// A note about the server or the run (a capability it lacks, where a count comes
    /// from); `always`: said even when quiet.
    fn note(&mut self, _msg: &str, _always: bool) {}
    /// A line of the setup (the flush chosen, the plan), said unless quiet.
    fn info(&mut self, _msg: &str) {}
    /// Measuring is over.
    fn finish(&mut self) {}
}

/// What to do when a request fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Record the failure and go on with the next sample.
    Continue,
    /// Record the failure and stop the sweep.
    Stop,
}

/// Settings of the measuring loop.
#[derive(Debug, Clone)]
pub struct BenchSettings {
    /// Run id stamped on every sample.
    pub run_id: String,
    /// Tokens to generate per request.
    pub output_tokens: u32,
    /// How many repetitions each context gets.
    pub policy: RepPolicy,
    /// Ask the server not to reuse its cache.
    pub cache_bypass: bool,
    /// Allowed |server prompt tokens − target|.
    pub length_tolerance: u64,
    /// Allowed difference as a fraction of the target, when larger (calibrated lengths).
    pub length_tolerance_pct: f64,
    /// Whole-request timeout: `base + per_1k × context/1000`.
    pub timeout_base: Duration,
    /// Extra timeout per 1000 context tokens.
    pub timeout_per_1k: Duration,
    /// Longest silence once bytes flow.
    pub stall_timeout: Duration,
    /// Failure policy.
    pub on_error: OnError,
    /// Flush the server's prefix cache before every measured request.
    pub flush: bool,
    /// How long a flush refused because the server is busy is retried (`--flush-wait`).
    pub flush_wait: Duration,
    /// Scrape Prometheus counters before and after every sample.
    pub metrics: Option<Scraper>,
    /// `Some((A, B))`: the two-point method (non-streamed, max_tokens A then B).
    pub two_point: Option<(u32, u32)>,
    /// Warm decode samples after each cold one, reusing its prefix on purpose.
    pub decode_samples: u32,
    /// Needle checks after each context's speed samples (`--needle`).
    pub needle: Option<NeedleSettings>,
    /// Where the nonce ends in what the server sees (tokens it adds in front, then the
    /// nonce), known after the warmup; `None` without a nonce.
    pub nonce_end: Option<u64>,
    /// The idle check around every measured request (`None`: `--idle-check off`, or the
    /// server exposes nothing to read).
    pub idle: Option<crate::idle::IdleCheck>,
    /// `--prompts K`: repetition `r` sends prompt `r mod K` (its corpus window).
    pub prompts: Option<u32>,
    /// Behind a router: the workers read around, and flushed before, every sample (`None`:
    /// one server, or no worker reachable).
    pub fleet: Option<crate::fleet::Fleet>,
    /// Flush each worker of `fleet` before every cold sample (not with `--flush never`).
    pub fleet_flush: bool,
    /// The server's maximum context, where a designed run's fits are extrapolated to
    /// (`None`: not known).
    pub extrapolate_to: Option<u64>,
    /// Seconds per token the warmup took end to end (prompt and output tokens together):
    /// before any point is measured, a request's predicted cost is this times its tokens
    /// (`None`: no warmup timed).
    pub warmup_s_per_token: Option<f64>,
}

/// How the needle checks are made (see [`crate::needle`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeedleSettings {
    /// Depths, percent of the filler before the fact.
    pub depths: Vec<u32>,
    /// `--prompt-seed`: the values are drawn from it when given.
    pub seed: Option<u64>,
    /// Nonce tokens at the start of every prompt (0 with `--nonce off`).
    pub nonce_tokens: usize,
}

impl BenchSettings {
    /// Allowed |server prompt tokens − target| at `context`.
    pub fn tolerance_for(&self, context: u64) -> u64 {
        self.length_tolerance
            .max((self.length_tolerance_pct * context as f64).ceil() as u64)
    }

    /// What a sample at `context` is checked against.
    pub fn target(&self, context: u64) -> Target<'_> {
        Target {
            run_id: &self.run_id,
            tolerance: self.tolerance_for(context),
            output_tokens: self.output_tokens,
            nonce_end: self.nonce_end,
        }
    }

    /// Timeouts for a request at `context` tokens: long prompts are allowed longer.
    pub fn timeouts_for(&self, context: u64) -> Timeouts {
        Timeouts {
            request: self.timeout_base + self.timeout_per_1k.mul_f64(context as f64 / 1000.0),
            stall: self.stall_timeout,
        }
    }

    /// Timeouts for an unmeasured request (the warmup, dry-run calibration): nothing
    /// predicts its cost yet, so a tiny `--timeout` meant for measured requests (which the
    /// cost model raises) does not cut it; it gets at least [`UNMEASURED_TIMEOUT`].
    pub fn timeouts_unmeasured(&self, context: u64) -> Timeouts {
        let mut t = self.timeouts_for(context);
        t.request = t.request.max(UNMEASURED_TIMEOUT);
        t
    }

    /// A request's cost at the warmup's pace: its context and output tokens at the warmup's
    /// seconds per token (prefill is at least linear in the context, so this is a floor).
    pub fn warmup_predicted_s(&self, context: u64) -> Option<f64> {
        self.warmup_s_per_token
            .map(|r| r * (context as f64 + f64::from(self.output_tokens)))
    }

    /// Timeouts once the cost model predicts the request: the static allowance or four
    /// times the prediction above the base, whichever is larger, so a slow-but-healthy
    /// long point is never cut while a hung short one is caught early.
    pub fn timeouts_with_prediction(&self, context: u64, predicted_s: Option<f64>) -> Timeouts {
        let mut t = self.timeouts_for(context);
        // Before the cost model has a measured point, the warmup's pace predicts: a server
        // measured at 9 prompt tokens/s needs a minute for 512, beyond the static 62.6 s.
        let predicted_s = predicted_s.or_else(|| self.warmup_predicted_s(context));
        if let Some(p) = predicted_s.filter(|p| p.is_finite() && *p > 0.0) {
            t.request = t
                .request
                .max(self.timeout_base + Duration::from_secs_f64(4.0 * p));
        }
        t
    }
}

/// How the measuring loop ended.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// Samples recorded by this invocation.
    pub recorded: usize,
    /// Of those, failed.
    pub failed: usize,
    /// Of those, contaminated.
    pub contaminated: usize,
    /// Samples skipped because already recorded (resume).
    pub skipped: usize,
    /// Server-reported busy time of the recorded samples (prompt + generation), in ms.
    pub server_busy_ms: f64,
    /// Set when the sweep stopped early, with the reason.
    pub stopped: Option<String>,
    /// The user interrupted.
    pub interrupted: bool,
    /// What a client-side timeout leaves behind was said (once per run).
    pub timeout_told: bool,
}

impl Tally {
    /// Wall time over server-busy time, when it means something: only for a sweep that
    /// completed every sample (a stopped, interrupted or failing sweep spent wall time the
    /// server never reported, so the ratio would blame the client). `Err` says why not.
    pub fn efficiency(&self, wall_s: f64) -> Result<f64, String> {
        let busy_s = self.server_busy_ms / 1000.0;
        if self.interrupted {
            Err("the sweep was interrupted".into())
        } else if self.stopped.is_some() {
            Err("the sweep stopped early".into())
        } else if self.failed > 0 {
            Err(format!(
                "{} sample(s) failed, and failures report no server time",
                self.failed
            ))
        } else if busy_s <= 0.0 {
            Err("the server reported no timings".into())
        } else {
            Ok(wall_s / busy_s)
        }
    }
}

/// What the measuring loop drives and where its results go: one bundle instead of the same
/// six arguments on every function of the loop.
pub struct RunCtx<'r> {
    /// The server's protocol.
    pub backend: &'r dyn Backend,
    /// Prompts of exact length.
    pub builder: &'r mut PromptBuilder,
    /// How to measure.
    pub settings: &'r BenchSettings,
    /// Where samples go, one line each as measured.
    pub writer: &'r mut ResultsWriter,
    /// Who listens (progress, warnings).
    pub observer: &'r mut dyn Observer,
    /// Turns true on Ctrl-C.
    pub interrupt: &'r mut tokio::sync::watch::Receiver<bool>,
}

impl RunCtx<'_> {
    /// The same bundle, borrowed again for a callee.
    pub fn reborrow(&mut self) -> RunCtx<'_> {
        RunCtx {
            backend: self.backend,
            builder: &mut *self.builder,
            settings: self.settings,
            writer: &mut *self.writer,
            observer: &mut *self.observer,
            interrupt: &mut *self.interrupt,
        }
    }
}

/// How one step of the loop (a point, a repetition, a warm cell) ended.
pub enum Step {
    /// Go on.
    Go,
    /// The user interrupted.
    Interrupted,
    /// The run must stop, for this reason.
    Stopped(String),
}

impl Step {
    /// Whether the run ends here; an ending is noted on `tally`.
    pub fn ends(self, tally: &mut Tally) -> bool {
        match self {
            Step::Go => false,
            Step::Interrupted => {
                tally.interrupted = true;
                true
            }
            Step::Stopped(reason) => {
                tally.stopped = Some(reason);
                true
            }
        }
    }
}
