//! A sweep as a library session. A validated [`SweepPlan`] holds every value a sweep needs
//! (the binary builds it from the command line; the campaign and other modes build theirs
//! from it); [`Session::open`] probes the server; [`Session::prepare`] connects, settles the
//! request's optional fields, tokenizes the corpus, decides the flush and the metrics, and
//! warms up; [`Session::header`] gives the results header that [`Output::start`] writes
//! (or, resuming, checks); [`Session::run`] measures; [`Session::finish`] writes the end
//! record. Every message for
//! the user goes through the [`Observer`]; nothing here prints.

mod output;
pub mod warm;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use output::{new_run_id, NonceHistory, Output, OutputError};

use crate::adaptive::RepPolicy;
use crate::bench::{self, BenchSettings, Observer, OnError, RunCtx, Tally};
use crate::corpus::{Corpus, CorpusError, CorpusSpec};
use crate::plan;
use crate::prompt::{PromptBuilder, NONCE_TOKENS};
use ctxbench_client::family::ConnectOptions;
use ctxbench_client::openai::EndpointChoice;
use ctxbench_client::probe::{self, ProbeError};
use ctxbench_client::{family, Backend, BackendKind, Http, Scraper, ServerProfile};
use ctxbench_schema::error::{ClientError, RecordError, UsageError};
use ctxbench_schema::record::{
    self, CorpusInfo, EndRecord, FlushChoice, Host, Line, ResultsWriter, RunConfig, RunHeader,
    Sample, SCHEMA_VERSION,
};
use ctxbench_stats::capacity;

/// Every value of one sweep, validated: nothing is read from the command line after it.
#[derive(Clone)]
pub struct SweepPlan {
    /// The server's base URL.
    pub url: String,
    /// The API key, sent as a Bearer token (never recorded or printed).
    pub api_key: Option<String>,
    /// The environment variable the key was read from (named in a refusal's hint).
    pub api_key_env: String,
    /// The key for a `--metrics-url` on the same server (`None` elsewhere).
    pub metrics_api_key: Option<String>,
    /// A private CA for HTTPS, PEM.
    pub ca_cert: Option<Vec<u8>>,
    /// The protocol asked for (`auto`: probe).
    pub backend: BackendKind,
    /// `--backend` as given, recorded in the run's identity.
    pub backend_requested: String,
    /// The model to name in requests, when not the server's first.
    pub model: Option<String>,
    /// The OpenAI protocol's generation path.
    pub endpoint: EndpointChoice,
    /// A server whose tokenizer makes this one's prompts (a gateway's upstream).
    pub tokenizer_url: Option<String>,
    /// `--metrics-url`: a URL, a path relative to `url`, `off`, or `None` (the server's own).
    pub metrics_url: Option<String>,
    /// How long to wait for a server that is not ready yet.
    pub wait_ready: Duration,
    /// The results file (`None` with `dry_run`).
    pub out: Option<PathBuf>,
    /// Continue `out`.
    pub resume: bool,
    /// Print the plan and predicted duration, measure nothing.
    pub dry_run: bool,
    /// The run's name in reports.
    pub label: Option<String>,
    /// The command line of a server ctxbench started (campaigns), recorded.
    pub managed_cmd: Option<String>,
    /// The draft length K of a campaign variant (`--spec-flags`), recorded.
    pub spec_k: Option<u32>,
    /// Only warnings and the summary on the terminal.
    pub quiet: bool,
    /// `--price-per-hour`: the end report adds the price of a token (USD per hour).
    pub price_per_hour: Option<f64>,
    /// `--model-config`: the model's size from a Hugging Face config, recorded in the
    /// header (completing what the server says of itself).
    pub model_facts: Option<ctxbench_schema::model::ModelFacts>,
    /// `--hardware`, `--memory-bandwidth`, `--peak-tflops`: the end report's roofline.
    pub roofline: Option<ctxbench_stats::roofline::Limits>,
    /// The points, sorted; `None`: the default ladder from the server's limit.
    pub contexts: Option<Vec<u64>>,
    /// The text prompts are cut from.
    pub corpus: CorpusSpec,
    /// `corpus` is `--corpus auto`'s repeated sentence: natural text instead when the probe
    /// sees speculation ([`crate::corpus::default`]).
    pub corpus_by_default: bool,
    /// Seed of the corpus (random corpora and window order).
    pub seed: u64,
    /// `--prompt-seed`: reproducible nonces.
    pub prompt_seed: Option<u64>,
    /// A unique nonce at token 0 of every prompt.
    pub nonce: bool,
    /// Ask the server not to reuse its cache, where the API allows it.
    pub cache_bypass: bool,
    /// When to flush the server's prefix cache.
    pub flush: FlushChoice,
    /// How long a flush refused while the server is busy is retried.
    pub flush_wait: Duration,
    /// Check the server is idle around every measured request (`--idle-check`).
    pub idle_check: bool,
    /// Longest wait for the server to be idle before a sample (`--idle-wait`).
    pub idle_wait: Duration,
    /// `Some((A, B))`: the two-point method.
    pub two_point: Option<(u32, u32)>,
    /// Repetitions per point.
    pub policy: RepPolicy,
    /// Output tokens per request (per wave request in a grid).
    pub output_tokens: u32,
    /// Allowed |server prompt tokens − target|.
    pub length_tolerance: u64,
    /// Whole-request timeout base.
    pub timeout: Duration,
    /// Extra timeout per 1000 context tokens.
    pub timeout_per_1k: Duration,
    /// Longest silence once bytes flow.
    pub stall_timeout: Duration,
    /// Failure policy.
    pub on_error: OnError,
    /// Warm decode samples after each cold one.
    pub decode_samples: u32,
    /// Needle depths when `--needle` is on.
    pub needle_depths: Option<Vec<u32>>,
    /// Concurrency levels (`[1]`: one request at a time).
    pub concurrency: Vec<u32>,
    /// `--mode append|conversation|tiers`: a warm measurement instead of the cold sweep.
    pub warm: Option<ctxbench_schema::warm::WarmConfig>,
    /// `--prompts K`: distinct prompts per context (see `RunConfig::prompts`).
    pub prompts: Option<u32>,
    /// `--worker URL`: workers behind a router that ctxbench reads and flushes itself
    /// (beside those the router lists).
    pub workers: Vec<String>,
}

impl std::fmt::Debug for SweepPlan {
    // Hand-written so the API key never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SweepPlan")
            .field("url", &ctxbench_client::http::redact_url(&self.url))
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("backend", &self.backend)
            .field("contexts", &self.contexts)
            .field("out", &self.out)
            .finish_non_exhaustive()
    }
}

impl SweepPlan {
    /// Whether this is a concurrency grid (a level above 1).
    pub fn grid(&self) -> bool {
        self.concurrency != [1]
    }

    /// The longest generation one request asks for.
    pub fn longest_output(&self) -> u64 {
        u64::from(self.two_point.map_or(self.output_tokens, |(_, b)| b))
    }

    /// Tokens of nonce at the start of every prompt.
    pub fn nonce_tokens(&self) -> usize {
        if self.nonce {
            NONCE_TOKENS
        } else {
            0
        }
    }
}

/// Why a session could not go on; the binary adds what the user was doing.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The options do not fit the server.
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// Talking to the server failed while doing `during`.
    #[error("{during}")]
    Client {
        /// What ctxbench was doing.
        during: &'static str,
        /// What went wrong.
        #[source]
        source: ClientError,
    },
    /// The results file.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// The corpus.
    #[error("preparing the corpus")]
    Corpus(#[source] CorpusError),
    /// Learning valid token ids for the nonce from the server's tokenizer.
    #[error("learning token ids for the nonce")]
    NonceIds(#[source] CorpusError),
}

impl From<ProbeError> for SessionError {
    fn from(e: ProbeError) -> Self {
        match e {
            ProbeError::Usage(u) => SessionError::Usage(u),
            ProbeError::Client(c) => SessionError::Client {
                during: "probing the server",
                source: c,
            },
        }
    }
}

/// `.during("…")` on a client result.
trait During<T> {
    fn during(self, what: &'static str) -> Result<T, SessionError>;
}

impl<T> During<T> for Result<T, ClientError> {
    fn during(self, what: &'static str) -> Result<T, SessionError> {
        self.map_err(|source| SessionError::Client {
            during: what,
            source,
        })
    }
}

/// A probed server and, once prepared, everything a run needs.
pub struct Session {
    /// The plan.
    pub plan: SweepPlan,
    /// The server's client.
    pub http: Http,
    /// What the probe (and the preparation) learned; recorded in the header.
    pub profile: ServerProfile,
    prepared: Option<Prepared>,
    /// Behind a router: the workers ctxbench reads itself.
    fleet: Option<crate::fleet::Fleet>,
}

/// What [`Session::prepare`] made.
struct Prepared {
    backend: Box<dyn Backend>,
    contexts: Vec<u64>,
    corpus: Arc<Corpus>,
    builder: PromptBuilder,
    settings: BenchSettings,
    flush: Option<String>,
    metrics: Option<Scraper>,
    idle_check: Option<String>,
    warm_busy_ms: f64,
    text_prompts: bool,
    nonce_history: NonceHistory,
}

/// What a finished run recorded, for the summary.
#[derive(Debug)]
pub struct Finished {
    /// The loop's counts.
    pub tally: Tally,
    /// Wall time of the whole sweep, seconds.
    pub wall_s: f64,
    /// Server-reported busy time, seconds.
    pub busy_s: f64,
    /// Wall over busy time, or why it is not computed.
    pub efficiency: Result<f64, String>,
}

impl Session {
    /// Probes the server the plan names (waiting for it to be ready), settles the OpenAI
    /// generation path and, with a tokenizer URL, adopts that tokenizer.
    pub async fn open(
        plan: SweepPlan,
        observer: &mut dyn Observer,
    ) -> Result<Session, SessionError> {
        let http = Http::new(&plan.url, plan.api_key.clone(), plan.ca_cert.as_deref())
            .map_err(UsageError::Invalid)?
            .with_key_env(&plan.api_key_env);
        let mut told = |m: &str| observer.info(m);
        let mut profile = probe::probe(
            &http,
            http.base(),
            plan.backend,
            plan.model.as_deref(),
            plan.wait_ready,
            &mut told,
        )
        .await?;
        ctxbench_client::openai::choose_endpoint(&mut profile, plan.endpoint)?;
        let mut plan = plan;
        if plan.corpus_by_default && crate::corpus::default::probe_speculates(&profile) {
            // The ladder, else the server's own limit: the longest prompt it can be asked.
            let longest = plan
                .contexts
                .as_ref()
                .and_then(|c| c.iter().max().copied())
                .or(profile.max_context);
            let (c, note) = crate::corpus::default::choose(true, longest);
            if let (Ok(spec), Some(note)) = (crate::corpus::parse_spec(c), note) {
                told(&note);
                plan.corpus = spec;
                profile.notes.push(note);
            }
        }
        if let Some(u) = plan.tokenizer_url.as_deref() {
            adopt_tokenizer(&mut profile, u).await?;
        }
        let fleet = open_fleet(&plan, &mut profile).await?;
        Ok(Session {
            plan,
            http,
            profile,
            prepared: None,
            fleet,
        })
    }

    /// Connects the protocol, settles the request's optional fields, tokenizes the corpus,
    /// decides the flush (none in a dry run) and the metrics, and sends the warmup.
    pub async fn prepare(
        &mut self,
        run_id: &str,
        observer: &mut dyn Observer,
    ) -> Result<(), SessionError> {
        let plan = &self.plan;
        let contexts =
            resolve_contexts(plan.contexts.clone(), &self.profile, plan.longest_output())?;
        let fam = family(self.profile.backend).ok_or_else(|| {
            UsageError::Invalid("internal: the probe chose no protocol".to_owned())
        })?;
        let backend = fam.connect(
            self.http.clone(),
            &self.profile,
            &ConnectOptions {
                nonce_tokens: plan.nonce_tokens(),
                largest_context: contexts.last().copied().unwrap_or(0),
                output_tokens: plan.longest_output().max(u64::from(plan.output_tokens)),
            },
        )?;
        let length = fam.length_policy(&self.profile);
        needle_needs_exact_lengths(plan, length.tolerance_pct)?;
        negotiate(backend.as_ref(), &mut self.profile, observer).await?;
        let corpus = prepare_corpus(
            plan,
            backend.as_ref(),
            &contexts,
            &self.profile,
            length.text_prompts,
        )
        .await?;
        let flush = match plan.dry_run {
            // A dry run measures nothing, so it must not erase the server's cache either.
            true => None,
            false => decide_flush(plan, backend.as_ref(), &mut self.profile, observer).await?,
        };
        let metrics = metrics_scraper(plan, &self.http, &mut self.profile, observer).await?;
        let mut settings = bench_settings(plan, &self.profile, run_id, length.tolerance_pct);
        settings.flush = flush.is_some();
        settings.metrics = metrics.clone();
        let idle = match self.profile.router.is_some() {
            // Through a router, /slots and /metrics are one worker's: the fleet is read instead.
            true => {
                let fleet = self.fleet.as_ref();
                fleet_checks(
                    plan,
                    &self.http,
                    &mut self.profile,
                    fleet,
                    &mut settings,
                    observer,
                )
                .await
            }
            false => idle_check(plan, &self.http, &self.profile, metrics.as_ref(), observer).await,
        };
        settings.idle = idle.check;
        let corpus = Arc::new(corpus);
        let mut builder = PromptBuilder::new(Arc::clone(&corpus), plan.nonce);
        // First tokens earlier runs sent to this server: a prefix cache that is not flushed
        // (SGLang's radix cache matches even one token) still holds those prompts.
        let nonce_history = NonceHistory::open(&self.profile.url, self.profile.model.as_deref());
        if let Some(seed) = plan.prompt_seed {
            // A reproducible run sends what its twin sent: no history avoidance here; the
            // flush and the cached-token check still catch a replay that hits a cache.
            builder = builder.seeded(seed);
        } else if plan.nonce && !length.text_prompts {
            let mut recent = nonce_history.load();
            recent.reverse();
            builder.avoid_first(recent);
        }
        let warm = warm_up(
            backend.as_ref(),
            &mut builder,
            &settings,
            &mut self.profile,
            metrics.as_ref(),
            length.server_adds_bos,
            observer,
        )
        .await?;
        // The server's own tokens in front (BOS, a chat template's prefix), then the nonce.
        // Calibrated prompts know neither as tokens: the server's count of the warmup's
        // nonce alone holds both (the whole template, as on the tokenizer path), and one
        // token more per nonce unit covers nonces of longer words.
        settings.warmup_s_per_token = warm.s_per_token;
        settings.nonce_end = plan.nonce.then(|| match warm.counted_nonce {
            Some(c) => c + plan.nonce_tokens() as u64,
            None => warm.server_added + plan.nonce_tokens() as u64,
        });
        if let Some(w) = &plan.warm {
            warm::check(w, &plan.concurrency, &self.profile)?;
        }
        if plan.contexts.is_some() && self.profile.max_context.is_none() {
            let note = "the server does not report its maximum context; a --contexts point beyond it will fail when sent";
            observer.warn(note);
            self.profile.notes.push(note.to_owned());
        }
        self.prepared = Some(Prepared {
            backend,
            contexts,
            corpus,
            builder,
            settings,
            flush,
            metrics,
            idle_check: Some(idle.description),
            warm_busy_ms: warm.server_busy_ms,
            text_prompts: length.text_prompts,
            nonce_history,
        });
        Ok(())
    }

    fn ready(&self) -> Result<&Prepared, SessionError> {
        self.prepared.as_ref().ok_or_else(|| {
            UsageError::Invalid("internal: the session was not prepared".to_owned()).into()
        })
    }

    /// The points to measure (known once prepared).
    pub fn contexts(&self) -> &[u64] {
        self.prepared.as_ref().map_or(&[], |p| &p.contexts)
    }

    /// The tokenized corpus (once prepared).
    pub fn corpus(&self) -> Option<&Corpus> {
        self.prepared.as_ref().map(|p| p.corpus.as_ref())
    }

    /// The server's limits, for the capacity prediction.
    pub fn limits(&self) -> capacity::Limits {
        capacity::Limits {
            server_kind: self.profile.server_kind.clone(),
            slots: self.profile.total_slots,
            kv_pool_tokens: self.profile.kv_pool_tokens,
            flags: ctxbench_client::family_of_server(&self.profile.server_kind)
                .map(|f| f.capacity_flags())
                .unwrap_or_default(),
        }
    }

    /// The prepared protocol, prompt builder and loop settings (a dry run's calibration).
    pub fn parts(
        &mut self,
    ) -> Result<(&dyn Backend, &mut PromptBuilder, &BenchSettings), SessionError> {
        let p = self.prepared.as_mut().ok_or_else(|| {
            SessionError::from(UsageError::Invalid(
                "internal: the session was not prepared".to_owned(),
            ))
        })?;
        Ok((p.backend.as_ref(), &mut p.builder, &p.settings))
    }

    /// What a trace replay drives (once prepared): the protocol, the tokenized corpus, the
    /// loop's settings and the tokens the server adds in front of a token-id prompt.
    pub fn replay_parts(
        &self,
    ) -> Result<(&dyn Backend, Arc<Corpus>, &BenchSettings, u64), SessionError> {
        let p = self.ready()?;
        Ok((
            p.backend.as_ref(),
            Arc::clone(&p.corpus),
            &p.settings,
            p.builder.server_added(),
        ))
    }

    /// The results header of this run: the plan's identity, the server as probed and
    /// prepared, the corpus, ctxbench and the host.
    pub fn header(&self, run_id: &str) -> Result<RunHeader, SessionError> {
        let p = self.ready()?;
        let mut server = ctxbench_client::server_info(&self.profile);
        server.flush_check = p.flush.clone();
        server.idle_check = p.idle_check.clone();
        // Tried (auto or always) and either working or not; `--flush never` tries nothing.
        server.flush_available =
            (self.plan.flush != FlushChoice::Never).then_some(p.flush.is_some());
        // The flag belongs to the server, whichever protocol is spoken to it.
        server.cached_tokens_hint = self
            .profile
            .detected
            .and_then(family)
            .and_then(|f| f.cached_tokens_hint())
            .map(str::to_owned);
        Ok(RunHeader {
            schema: SCHEMA_VERSION,
            run_id: run_id.to_owned(),
            ctxbench_version: env!("CARGO_PKG_VERSION").into(),
            ctxbench_commit: Some(crate::COMMIT.into()),
            started_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            host: Host::current(),
            config: run_config(&self.plan, &self.profile, p),
            server,
            corpus: CorpusInfo {
                spec: self.plan.corpus.clone(),
                label: self.plan.corpus.label(),
                tokens: p.corpus.tokens.len() as u64,
                wraps: p.corpus.wraps,
                tokenize_requests: p.corpus.tokenize_requests as u64,
                bytes: p.corpus.text.as_ref().map(|t| t.0),
                text_hash: p.corpus.text.as_ref().map(|t| t.1.clone()),
            },
            label: self.plan.label.clone(),
            // The server's own figures first: they describe the file it serves.
            model_facts: match (
                self.profile.model_facts.clone(),
                self.plan.model_facts.clone(),
            ) {
                (Some(s), Some(c)) => Some(s.or(c)),
                (s, c) => s.or(c),
            },
            imported: None,
        })
    }

    /// Measures every point (one request at a time, or waves of a concurrency grid),
    /// skipping what `prior` already holds; every sample is written as it is measured.
    pub async fn run(
        &mut self,
        writer: &mut ResultsWriter,
        prior: &[Sample],
        observer: &mut dyn Observer,
        interrupt: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Result<Tally, SessionError> {
        let limits = self.limits();
        let grid = self.plan.grid();
        let levels = self.plan.concurrency.clone();
        let p = self.prepared.as_mut().ok_or_else(|| {
            SessionError::from(UsageError::Invalid(
                "internal: the session was not prepared".to_owned(),
            ))
        })?;
        let ctx = RunCtx {
            backend: p.backend.as_ref(),
            builder: &mut p.builder,
            settings: &p.settings,
            writer,
            observer,
            interrupt,
        };
        let mut tally = match (&self.plan.warm, grid) {
            (Some(w), _) => warm::run(ctx, &p.contexts, (w, &levels), &self.profile, prior).await?,
            (None, false) => bench::run(ctx, &p.contexts, prior).await?,
            (None, true) => {
                bench::wave::run_grid(ctx, &p.contexts, &levels, &limits, prior).await?
            }
        };
        tally.server_busy_ms += p.warm_busy_ms;
        if self.plan.nonce && !p.text_prompts {
            p.nonce_history
                .save(p.builder.used_first(), p.corpus.nonce_pool.len());
        }
        Ok(tally)
    }

    /// Writes the end record: wall and server-busy time and what was recorded.
    pub fn finish(
        &self,
        writer: &mut ResultsWriter,
        run_id: &str,
        tally: Tally,
        started: std::time::Instant,
    ) -> Result<Finished, SessionError> {
        let wall_s = started.elapsed().as_secs_f64();
        let busy_s = tally.server_busy_ms / 1000.0;
        let efficiency = tally.efficiency(wall_s);
        writer.append(&Line::End(EndRecord {
            run_id: run_id.to_owned(),
            wall_s,
            server_busy_s: busy_s,
            efficiency: efficiency.as_ref().ok().copied(),
            recorded: tally.recorded,
            failed: tally.failed,
            interrupted: tally.interrupted,
        }))?;
        Ok(Finished {
            tally,
            wall_s,
            busy_s,
            efficiency,
        })
    }
}

/// `--tokenizer-url`: the OpenAI protocol makes its prompts through that server's
/// tokenizer; a usage error for other protocols or where no tokenizer answers there.
async fn adopt_tokenizer(p: &mut ServerProfile, url: &str) -> Result<(), SessionError> {
    if p.backend != BackendKind::Openai {
        return Err(UsageError::Invalid(format!(
            "--tokenizer-url is for OpenAI-compatible servers that hide their tokenizer; this server was probed as {} ({}), whose own tokenizer is used",
            p.server_kind,
            p.backend.as_str()
        ))
        .into());
    }
    let h = Http::new(url, None, None).map_err(UsageError::Invalid)?;
    ctxbench_client::openai::adopt_tokenizer(p, &h)
        .await
        .map_err(|e| UsageError::Invalid(e.to_string()).into())
}

/// Settles the request's optional fields before anything else is sent: fields the server
/// refuses are left out from here on, and the header says which and what it costs.
async fn negotiate(
    backend: &dyn Backend,
    profile: &mut ServerProfile,
    observer: &mut dyn Observer,
) -> Result<(), SessionError> {
    let negotiated = backend.negotiate().await.during(
        "settling the request's optional fields with the server (a test request of two tokens)",
    )?;
    for n in &negotiated.notes {
        observer.note(n, false);
        profile.notes.push(n.clone());
    }
    profile.dropped_fields = negotiated.dropped;
    Ok(())
}

/// The points to measure: the plan's list checked against the server's limit, or the
/// default ladder up to that limit.
fn resolve_contexts(
    given: Option<Vec<u64>>,
    profile: &ServerProfile,
    output_tokens: u64,
) -> Result<Vec<u64>, UsageError> {
    match (given, profile.max_context) {
        (Some(c), Some(limit)) => {
            let source = profile.max_context_source.as_deref().unwrap_or("server");
            plan::check_limit(&c, output_tokens, limit, source)?;
            Ok(c)
        }
        // Warned about once the run can go ahead (after connecting and the warmup).
        (Some(c), None) => Ok(c),
        (None, Some(limit)) => {
            let l = plan::default_ladder(limit, output_tokens);
            if l.is_empty() {
                return Err(UsageError::Invalid(format!(
                    "the server's context ({limit} tokens) is too small for a sweep"
                )));
            }
            Ok(l)
        }
        (None, None) => Err(UsageError::Invalid(
            "the server does not report its maximum context, so no default ladder can be built: give --contexts".into(),
        )),
    }
}

/// The corpus, tokenized once, with a nonce pool wide enough that no two prompts of this
/// or an earlier run share their first token.
async fn prepare_corpus(
    plan: &SweepPlan,
    backend: &dyn Backend,
    contexts: &[u64],
    profile: &ServerProfile,
    text_prompts: bool,
) -> Result<Corpus, SessionError> {
    let needed = contexts.last().copied().unwrap_or(0) as usize;
    let mut corpus = Corpus::load(&plan.corpus, backend, needed, profile.n_vocab, plan.seed)
        .await
        .map_err(SessionError::Corpus)?;
    if !text_prompts {
        // Token-id prompts can start with any ordinary id: a vocabulary-wide nonce pool
        // makes a first-token match with an earlier run's cached prompt unlikely.
        match profile.n_vocab {
            Some(v) => corpus.widen_nonce_pool(v),
            // SGLang and vLLM do not report it: learn a few thousand valid ids from the
            // server's tokenizer instead (a small pool made first tokens collide).
            None => {
                let ids = crate::corpus::learn_ids(backend)
                    .await
                    .map_err(SessionError::NonceIds)?;
                corpus.add_nonce_ids(&ids);
            }
        }
    }
    Ok(corpus)
}

/// Tries one flush up front and decides whether to flush before every sample; the
/// profile records what happened, so the header says what the terminal said.
async fn decide_flush(
    plan: &SweepPlan,
    backend: &dyn Backend,
    profile: &mut ServerProfile,
    observer: &mut dyn Observer,
) -> Result<Option<String>, SessionError> {
    if plan.flush == FlushChoice::Never {
        let would = profile
            .flush
            .as_deref()
            .map_or(String::new(), |f| format!("; this server's would be: {f}"));
        observer.info(&format!("flush: never (--flush never){would}"));
        return Ok(None);
    }
    match bench::flush_when_idle(backend, plan.flush_wait).await {
        Ok(what) => {
            observer.info(&format!("flush: {what} before every sample"));
            Ok(Some(what))
        }
        // Busy is temporary: flushing stays on (auto and always), each sample waits for
        // the server to go idle again, and a sample whose flush was still refused says so.
        Err(e @ ClientError::Busy { .. }) => {
            let note = format!(
                "the server stayed busy for {} s ({e}); flushing stays on and each sample waits for it to go idle (another client is using this server: timings may include its load)",
                plan.flush_wait.as_secs_f64()
            );
            observer.warn(&note);
            profile.notes.push(note);
            Ok(Some(format!("{} (busy at start)", backend.kind().as_str())))
        }
        Err(e) if plan.flush == FlushChoice::Auto => {
            let relying = if profile.cache_bypass {
                "the nonce, the per-request cache switch and cached-token verification"
            } else {
                "the nonce and cached-token verification"
            };
            let note = format!("no cache flush: {e}; relying on {relying}");
            observer.note(&note, true);
            profile.flush = None;
            profile.notes.push(note);
            Ok(None)
        }
        Err(e) => Err(UsageError::Invalid(format!(
            "--flush always, but the server's cache cannot be flushed: {e}; use --flush auto or never"
        ))
        .into()),
    }
}

/// The Prometheus scraper: `--metrics-url`, else the server's `/metrics` when it answered.
/// A user-given endpoint is tried once up front, so a wrong one is said once, not only as
/// a flag on every sample.
async fn metrics_scraper(
    plan: &SweepPlan,
    http: &Http,
    profile: &mut ServerProfile,
    observer: &mut dyn Observer,
) -> Result<Option<Scraper>, SessionError> {
    let scraper = match plan.metrics_url.as_deref() {
        Some("off") => None,
        Some(u) if u.starts_with('/') => Some(Scraper::new(http.clone(), u)),
        Some(u) => {
            // The API key goes only to the server it belongs to.
            let key = plan
                .metrics_api_key
                .clone()
                .filter(|_| u.starts_with(http.base()));
            let h = Http::new(u, key, None).map_err(UsageError::Invalid)?;
            Some(Scraper::new(h, ""))
        }
        // A router forwards /metrics to one worker of its choosing: deltas across a sample
        // would be some worker's, not the one that served it (give --metrics-url to insist).
        None if profile.metrics && profile.router.is_some() => {
            let note = "/metrics through the router is one worker's (the router picks which): not scraped around samples; the workers' own counters are read per worker instead (--metrics-url to scrape one anyway)";
            observer.note(note, false);
            profile.notes.push(note.to_owned());
            None
        }
        None if profile.metrics => Some(Scraper::new(http.clone(), "/metrics")),
        None => None,
    };
    if let (Some(m), Some(_), false) = (&scraper, &plan.metrics_url, plan.dry_run) {
        if let Err(e) = m.scrape().await {
            let note = format!(
                "--metrics-url {} does not answer ({e}); every sample will be flagged metrics_unavailable",
                ctxbench_client::http::redact_url(&m.url())
            );
            observer.warn(&note);
            profile.notes.push(note);
        }
    }
    Ok(scraper)
}

/// How the idle state is checked around every sample: the recognised family's busy signals
/// (whichever protocol is spoken: the busy state is the server's), and its finished-work
/// counter where the metrics page has one. Said once on the terminal, recorded in the header.
async fn idle_check(
    plan: &SweepPlan,
    http: &Http,
    profile: &ServerProfile,
    metrics: Option<&Scraper>,
    observer: &mut dyn Observer,
) -> crate::idle::Discovered {
    if !plan.idle_check {
        let description =
            "not checked (--idle-check off): samples may include other clients' work".to_owned();
        observer.info(&format!("idle check: {description}"));
        return crate::idle::Discovered {
            check: None,
            description,
        };
    }
    let fam = profile.detected.or(Some(profile.backend)).and_then(family);
    // Dynamo's frontend is spoken to as a generic OpenAI server; its gauges are its own.
    let sources = ctxbench_client::dynamo::busy_sources(&profile.server_kind)
        .unwrap_or_else(|| fam.map_or(&[][..], |f| f.busy_sources()));
    // The finished-work counter, if the page carries one (read from a scrape's values).
    let mut counter = None;
    if let Some(snap) = match metrics {
        Some(m) if !plan.dry_run => m.scrape().await.ok(),
        _ => None,
    } {
        let d = ctxbench_client::metrics::deltas(
            &Default::default(),
            &snap,
            &ctxbench_client::kept_metric_names(),
        );
        counter = ctxbench_client::metrics_vocabularies()
            .find_map(|v| v.served(&d))
            .map(|s| s.counter);
    }
    let found = crate::idle::discover(http, sources, metrics, counter, plan.idle_wait).await;
    match found.check {
        Some(_) => observer.info(&format!("idle check: {}", found.description)),
        None => observer.note(&found.description, true),
    }
    found
}

/// Behind a router: judges the router's own fan-out flush per worker, flushes each
/// reachable worker once and puts the fleet in the loop's settings; the description is the
/// header's idle-check line.
async fn fleet_checks(
    plan: &SweepPlan,
    http: &Http,
    profile: &mut ServerProfile,
    fleet: Option<&crate::fleet::Fleet>,
    settings: &mut BenchSettings,
    observer: &mut dyn Observer,
) -> crate::idle::Discovered {
    let flush = plan.flush != FlushChoice::Never && !plan.dry_run;
    let urls = fleet.map(|f| f.urls()).unwrap_or_default();
    if let Some(r) = profile.router.as_mut() {
        if flush {
            r.fanout_flush = fanout_flush(http, &urls, &r.workers).await;
            for w in &r.fanout_flush {
                observer.info(&format!("router flush: {}: {}", w.worker, w.detail));
            }
        }
    }
    let Some(fleet) = fleet.cloned() else {
        let description = "not checked: behind a router whose workers ctxbench cannot reach (give each with --worker URL), the idle state cannot be read; samples may include other clients' work".to_owned();
        observer.note(&description, true);
        return crate::idle::Discovered {
            check: None,
            description,
        };
    };
    if flush {
        let verdicts = fleet.flush().await;
        for w in &verdicts {
            let verdict = if w.ok { "flushed" } else { "failed" };
            observer.info(&format!(
                "worker flush: {} {verdict}: {}",
                w.worker, w.detail
            ));
        }
        if let Some(r) = profile.router.as_mut() {
            r.worker_flush = verdicts;
        }
    }
    let description = match plan.idle_check {
        true => format!(
            "per worker: GET /slots and llamacpp:tokens_predicted_total (/metrics) of each of {} worker(s) ({}), read before each sample (waiting up to {} s for all to be idle) and after it; the worker that served each sample is recorded",
            urls.len(),
            urls.join(", "),
            fleet.wait.as_secs_f64()
        ),
        false => "not checked (--idle-check off); the worker that served each sample is still recorded".to_owned(),
    };
    observer.info(&format!("idle check: {description}"));
    let mut fleet = fleet;
    fleet.check = plan.idle_check;
    settings.fleet = Some(fleet);
    settings.fleet_flush = flush;
    crate::idle::Discovered {
        check: None,
        description,
    }
}

/// The workers behind a router (its own list, then `--worker`), kept if they answer; a
/// router that gives no context length gets the workers' least. `--worker` without a
/// recognised router marks the endpoint a router all the same: the user says it is one.
async fn open_fleet(
    plan: &SweepPlan,
    profile: &mut ServerProfile,
) -> Result<Option<crate::fleet::Fleet>, SessionError> {
    if profile.router.is_none() && !plan.workers.is_empty() {
        profile.router = Some(ctxbench_schema::record::RouterInfo {
            kind: "router".to_owned(),
            evidence: "--worker given".to_owned(),
            ..Default::default()
        });
    }
    let Some(r) = profile.router.as_mut() else {
        return Ok(None);
    };
    for w in &plan.workers {
        let w = w.trim_end_matches('/').to_owned();
        if !r.workers.contains(&w) {
            r.workers.push(w);
        }
    }
    let mut fleet = crate::fleet::Fleet::new(&r.workers, plan.api_key.clone(), plan.idle_wait)
        .map_err(UsageError::Invalid)?;
    let dropped = fleet.keep_readable().await;
    if !dropped.is_empty() {
        profile.notes.push(format!(
            "worker(s) {} answer neither /slots nor /metrics: not read or flushed per worker",
            dropped.join(", ")
        ));
    }
    let reachable = fleet.urls().len();
    r.worker_family = fleet.family().await;
    let family = r.worker_family.clone().unwrap_or_else(|| {
        format!(
            "{} (the answers the router forwards; the workers' own are unread)",
            profile.server_kind
        )
    });
    r.meaning = ctxbench_client::router::meaning(r, reachable, &family);
    if reachable == 0 {
        return Ok(None);
    }
    // The capacity map's pool: every worker's slots, not the one /props through the router shows.
    if let Some(n) = fleet.slots().await {
        profile.total_slots = Some(n);
        profile.notes.push(format!(
            "slots: {n}, the sum of the {reachable} worker(s)' own /slots (the capacity map predicts the fleet's knee from it)"
        ));
    }
    if profile.max_context.is_none() {
        if let Some((n, from)) = fleet.max_context().await {
            profile.max_context = Some(n);
            profile.max_context_source = Some(from);
        }
    }
    Ok(Some(fleet))
}

/// The router's own `POST /flush_cache`, which it fans out to every worker, judged per
/// worker (`workers`: the reachable ones, else the router's list).
async fn fanout_flush(
    http: &Http,
    reachable: &[String],
    listed: &[String],
) -> Vec<ctxbench_schema::record::WorkerFlush> {
    let workers = if reachable.is_empty() {
        listed
    } else {
        reachable
    };
    let (status, body) = match http
        .request(reqwest::Method::POST, "/flush_cache")
        .timeout(Duration::from_secs(30))
        .send()
        .await
    {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, ctxbench_client::http::head_text(r).await)
        }
        Err(e) => (0, e.to_string()),
    };
    ctxbench_client::router::judge_fanout_flush(status, &body, workers)
}

/// The measuring loop's settings; flush, metrics and the nonce's end are set once known.
fn bench_settings(
    plan: &SweepPlan,
    profile: &ServerProfile,
    run_id: &str,
    tolerance_pct: f64,
) -> BenchSettings {
    BenchSettings {
        run_id: run_id.to_owned(),
        output_tokens: plan.output_tokens,
        policy: plan.policy,
        cache_bypass: plan.cache_bypass && profile.cache_bypass,
        length_tolerance: plan.length_tolerance,
        length_tolerance_pct: tolerance_pct,
        timeout_base: plan.timeout,
        timeout_per_1k: plan.timeout_per_1k,
        stall_timeout: plan.stall_timeout,
        on_error: plan.on_error,
        flush: false,
        flush_wait: plan.flush_wait,
        metrics: None,
        two_point: plan.two_point,
        decode_samples: plan.decode_samples,
        needle: plan
            .needle_depths
            .clone()
            .map(|depths| bench::NeedleSettings {
                depths,
                seed: plan.prompt_seed,
                nonce_tokens: plan.nonce_tokens(),
            }),
        nonce_end: None,
        warmup_s_per_token: None,
        idle: None,
        fleet: None,
        fleet_flush: false,
        prompts: plan.prompts,
        extrapolate_to: profile.max_context,
    }
}

/// The warmup request (never measured, never sharing a prefix with a measured one), and
/// what it teaches about the server: tokens it adds (BOS, a chat template), whether it
/// reports cached tokens (in usage or in /metrics deltas) and timings. Recorded in the
/// profile.
async fn warm_up(
    backend: &dyn Backend,
    builder: &mut PromptBuilder,
    settings: &BenchSettings,
    profile: &mut ServerProfile,
    metrics: Option<&Scraper>,
    server_adds_bos: bool,
    observer: &mut dyn Observer,
) -> Result<bench::Warmup, SessionError> {
    let mut warm = bench::warmup(backend, builder, settings)
        .await
        .during("warmup request")?;
    if !server_adds_bos {
        warm.server_added = 0;
    }
    let chat = profile.endpoint.as_deref() == Some(ctxbench_client::openai::CHAT);
    let template_note = match (chat, server_adds_bos) {
        (true, false) => Some(format!(
            "chat template: its tokens are inside every length (calibration aims usage.prompt_tokens, template included, at the target){}",
            warm.counted_nonce.map_or_else(String::new, |c| format!("; {c} tokens for a message of the nonce alone (template included), so a cached count up to {} (one more per nonce word) is cold", c + crate::prompt::NONCE_TOKENS as u64))
        )),
        (true, true) => Some(format!(
            "chat template: {} tokens around the user message (usage.prompt_tokens − content tokens of the warmup), counted in every context length",
            warm.server_added
        )),
        (false, _) => None,
    };
    if let Some(note) = template_note {
        observer.note(&note, false);
        profile.notes.push(note);
    } else if warm.server_added > 1 {
        return Err(UsageError::Invalid(format!(
            "the server counted {} prompt tokens for {} token ids sent; it rewrites token-id prompts (a template?), so lengths cannot be exact",
            warm.reported.unwrap_or(0),
            warm.sent
        ))
        .into());
    }
    builder.set_server_added(warm.server_added);
    profile.server_added_tokens = Some(warm.server_added);
    profile.reports_cached_tokens = Some(warm.reports_cached_tokens);
    if !warm.reports_cached_tokens {
        cache_evidence_from_metrics(profile, metrics, observer).await;
    }
    profile.reports_timings = Some(warm.reports_timings);
    for n in backend.notes() {
        observer.note(&n, false);
        profile.notes.push(n);
    }
    Ok(warm)
}

/// A default `vllm serve` (or SGLang behind the OpenAI protocol) leaves the cached count out
/// of usage but counts prefix-cache hits in /metrics: each sample's deltas verify it.
async fn cache_evidence_from_metrics(
    profile: &mut ServerProfile,
    metrics: Option<&Scraper>,
    observer: &mut dyn Observer,
) {
    let Some(m) = metrics else { return };
    let Ok(snap) = m.scrape().await else { return };
    let d = ctxbench_client::metrics::deltas(
        &Default::default(),
        &snap,
        &ctxbench_client::kept_metric_names(),
    );
    if crate::sample::metrics_cache_evidence(&d).is_some() {
        profile.reports_cached_tokens = Some(true);
        let n = format!(
            "cached tokens: from each sample's {} prefix-cache counter deltas (usage carries no count)",
            ctxbench_client::http::redact_url(&m.url())
        );
        observer.note(&n, false);
        profile.notes.push(n);
    }
}

/// What the user chose: the run's identity for `--resume` and `compare`. What the server
/// answered (the flush's freed tokens, capabilities) goes to the header's `server`.
fn run_config(plan: &SweepPlan, profile: &ServerProfile, p: &Prepared) -> RunConfig {
    let s = &p.settings;
    RunConfig {
        backend_requested: plan.backend_requested.clone(),
        backend: profile.backend.as_str().to_owned(),
        url: profile.url.clone(),
        model: profile.model.clone(),
        contexts: p.contexts.clone(),
        output_tokens: s.output_tokens,
        reps: s.policy,
        corpus: plan.corpus.clone(),
        seed: plan.seed,
        cache_bypass: s.cache_bypass,
        nonce: plan.nonce,
        nonce_tokens: plan.nonce_tokens() as u32,
        length_tolerance: plan.length_tolerance,
        length_tolerance_pct: s.length_tolerance_pct,
        method: match plan.two_point {
            None => record::Method::Stream,
            Some(_) => record::Method::TwoPoint,
        },
        two_point_tokens: s.two_point,
        decode_samples: plan.decode_samples,
        flush: Some(plan.flush.clone()),
        metrics_url: p
            .metrics
            .as_ref()
            .map(|m| ctxbench_client::http::redact_url(&m.url())),
        server_cmd: plan.managed_cmd.clone(),
        spec_k: plan.spec_k,
        prompt_seed: plan.prompt_seed,
        needle_depths: plan.needle_depths.clone(),
        concurrency: plan.concurrency.clone(),
        warm: plan.warm.clone(),
        prompts: plan.prompts,
        replay: None,
    }
}

/// `--needle` on lengths calibrated against the server's count is refused before anything is
/// measured.
fn needle_needs_exact_lengths(plan: &SweepPlan, tolerance_pct: f64) -> Result<(), SessionError> {
    if plan.needle_depths.is_some() && tolerance_pct > 0.0 {
        // A calibrated length is only near the target: the fit would cut the question
        // or move the fact, and a check of such a prompt tests the prompt, not the model.
        return Err(UsageError::Invalid(format!(
            "--needle needs prompts of exact length, and on this server lengths are calibrated against its own count (within {}%: no tokenizer endpoint answered), so neither the question at the end nor each fact at its depth can be guaranteed; --tokenizer-url URL lends the tokenizer of a server of the same model, or leave out --needle",
            tolerance_pct * 100.0
        ))
        .into());
    }
    Ok(())
}
