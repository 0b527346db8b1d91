//! Options of `ctxbench replay`: a trace (or a synthetic agent workload) replayed against a
//! server, each request's reuse proven from the server's cached-token count.

use std::path::PathBuf;

use clap::Args;

// Written out, as sweep's: clap's generated line lists whichever options an error involved.
pub(crate) const REPLAY_USAGE: &str = "ctxbench replay TRACE --url URL [OPTIONS]
       ctxbench replay TRACE --dry-run [OPTIONS]
       ctxbench replay --synthetic agent (--url URL | --dry-run) [OPTIONS]";

pub(crate) const REPLAY_EXAMPLES: &str = "Examples:
  ctxbench replay conversation_trace.jsonl --dry-run          # format, requests, ideal reuse
  ctxbench replay conversation_trace.jsonl --url http://127.0.0.1:8080 -o r.jsonl
  ctxbench replay weka-sessions/ --url http://gpu-box:30000 --timing session --scale 0.25
  ctxbench replay trace.jsonl --url http://127.0.0.1:8080 -o r.jsonl --resume   # continue
  ctxbench replay --synthetic agent --sessions 4 --max-context 32k --dry-run

Formats (detected, named in the header): Mooncake / timed-trace JSONL, Weka / kv-cache-tester
JSON (a file or a folder of them), TraceLab round JSONL, the Azure LLM inference CSV, and
ctxbench's own JSONL (docs/trace-format.md). k means ×1024 in token counts.";

/// Options of `ctxbench replay`.
#[derive(Debug, Args, Clone)]
pub struct ReplayArgs {
    /// The trace: a file, or a folder of Weka / kv-cache-tester session files.
    #[arg(value_name = "TRACE", required_unless_present = "synthetic")]
    pub trace: Option<PathBuf>,

    /// Server base URL, without /v1.
    #[arg(
        value_name = "URL",
        help_heading = "Server",
        long,
        env = "CTXBENCH_URL",
        required_unless_present = "dry_run"
    )]
    pub url: Option<String>,

    /// Model name sent in OpenAI requests [default: the first of /v1/models].
    #[arg(help_heading = "Server", long, value_name = "NAME")]
    pub model: Option<String>,

    /// A server of the same model whose tokenizer is lent (its /tokenize and /detokenize):
    /// prompts become text of exact length where the measured server takes no token ids
    /// and has no tokenizer of its own (sglang-router: give one of its workers).
    #[arg(help_heading = "Server", long, value_name = "URL")]
    pub tokenizer_url: Option<String>,

    /// Name of the environment variable holding the API key (sent as a Bearer token).
    #[arg(
        help_heading = "Server",
        long,
        default_value = "CTXBENCH_API_KEY",
        value_name = "NAME"
    )]
    pub api_key_env: String,

    /// Results file (JSON Lines) [default: ctxbench-replay-<UTC time>.jsonl].
    #[arg(
        help_heading = "Output",
        long,
        short,
        visible_alias = "out",
        value_name = "FILE"
    )]
    pub output: Option<PathBuf>,

    /// Continue the replay in --output, skipping requests already recorded.
    #[arg(help_heading = "Output", long, requires = "output")]
    pub resume: bool,

    /// Print the plan (format, requests, sessions, tokens, ideal reuse ratio, span), send nothing.
    ///
    /// The plan also says how the format's rules were applied, input and output tokens apart,
    /// what was scaled or skipped, and a predicted server time with --cost-model. It reads the
    /// whole trace once, in bounded memory, and needs no server.
    #[arg(help_heading = "What to replay", long)]
    pub dry_run: bool,

    /// Multiply every length (input, output, block size) by F, keeping the reuse shape.
    ///
    /// Requests that shared k blocks still share k blocks. A 100k-token trace runs on a small
    /// server with --scale 0.1. The header and report say so.
    #[arg(help_heading = "What to replay", long, value_name = "F", value_parser = positive_factor)]
    pub scale: Option<f64>,

    /// Skip requests longer than TOKENS (input + output) [default: the server's context size;
    /// none on a dry run].
    ///
    /// They are counted and skipped, never truncated; the header and report say how many.
    #[arg(help_heading = "What to replay", long, value_name = "TOKENS", value_parser = token_count)]
    pub context_limit: Option<u64>,

    /// Replay only the first N requests of the trace.
    #[arg(help_heading = "What to replay", long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_requests: Option<u64>,

    /// Predicted server time for --dry-run: `prefill=TOK/S,decode=TOK/S`.
    ///
    /// Prefill and decode rates in tokens per second, e.g. `prefill=2000,decode=30` (from a
    /// sweep of the same server).
    /// Each request costs its uncached input (ideal reuse) over the prefill rate plus its
    /// output over the decode rate.
    #[arg(
        help_heading = "What to replay",
        long,
        value_name = "prefill=TOK/S,decode=TOK/S"
    )]
    pub cost_model: Option<String>,

    /// How requests are scheduled: `trace` or `session` [default: `trace` where the trace has
    /// timestamps, `session` where it has only think times (TraceLab)].
    ///
    /// `trace`: open loop, each request sent at its timestamp (÷ --speed) whatever the
    /// server is doing. `session`: within a session, the next request is sent after the
    /// previous answer plus the trace's think time (÷ --speed); sessions start at their first
    /// request's timestamp.
    #[arg(
        help_heading = "Timing",
        long,
        value_enum,
        value_name = "trace|session"
    )]
    pub timing: Option<TimingArg>,

    /// Replay X times faster than the trace (gaps and think times divided by X).
    #[arg(help_heading = "Timing", long, default_value_t = 1.0, value_name = "X", value_parser = positive_factor)]
    pub speed: f64,

    /// Cap every gap between requests (and every think time) at SECONDS; by default gaps are
    /// replayed whole.
    ///
    /// Replayed whole, they keep idle-time eviction, part of what a trace tests; the report
    /// says when gaps were capped.
    #[arg(help_heading = "Timing", long, value_name = "SECONDS", value_parser = positive_factor)]
    pub max_gap: Option<f64>,

    /// Reproduce a run's prompts exactly (the seed its header recorded) [default: a fresh salt].
    ///
    /// Each block id maps to one fixed block of token ids, deterministic from the run's salt
    /// and the id. A fresh salt per run means a rerun never hits the cache of the previous
    /// one; --prompt-seed N reuses a salt (an A/B of two servers on identical prompts).
    #[arg(help_heading = "Prompts and corpus", long, value_name = "N")]
    pub prompt_seed: Option<u64>,

    /// Prompt text: `repeat`, `random`, `natural`, or your own file or folder.
    #[arg(
        help_heading = "Prompts and corpus",
        long,
        default_value = "repeat",
        value_name = "repeat|random|natural|PATH"
    )]
    pub corpus: String,

    /// Service-level objectives for goodput, e.g. `ttft=2s,tpot=50ms`.
    #[arg(
        help_heading = "What to measure",
        long,
        value_name = "ttft=DUR,tpot=DUR"
    )]
    pub slo: Option<String>,

    /// Replay a generated workload instead of a trace file: `agent`.
    ///
    /// `agent`: sessions that grow turn by turn to --max-context, with think-time gaps and
    /// subagents sharing a system prefix; deterministic from --synthetic-seed
    /// (docs/replay.md names where each default comes from).
    #[arg(
        help_heading = "Synthetic workload (--synthetic agent)",
        long,
        value_enum,
        value_name = "agent",
        conflicts_with = "trace"
    )]
    pub synthetic: Option<SyntheticArg>,

    /// Agent sessions [default: 8].
    #[arg(help_heading = "Synthetic workload (--synthetic agent)", long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000), requires = "synthetic", conflicts_with = "trace")]
    pub sessions: Option<u32>,

    /// The context a session's main agent grows to, in tokens [default: 32k].
    #[arg(help_heading = "Synthetic workload (--synthetic agent)", long, value_name = "TOKENS", value_parser = token_count, requires = "synthetic", conflicts_with = "trace")]
    pub max_context: Option<u64>,

    /// Requests of each session's main agent [default: 24].
    #[arg(help_heading = "Synthetic workload (--synthetic agent)", long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000), requires = "synthetic", conflicts_with = "trace")]
    pub turns: Option<u32>,

    /// Mean think time between an answer and the session's next request [default: 4].
    #[arg(help_heading = "Synthetic workload (--synthetic agent)", long, value_name = "SECONDS", value_parser = non_negative, requires = "synthetic", conflicts_with = "trace")]
    pub think: Option<f64>,

    /// Subagents per session, each sharing the session's system prefix [default: 2].
    #[arg(help_heading = "Synthetic workload (--synthetic agent)", long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=10_000), requires = "synthetic", conflicts_with = "trace")]
    pub subagents: Option<u32>,

    /// Seed of the generated workload: the same seed, the same trace [default: 0].
    #[arg(
        help_heading = "Synthetic workload (--synthetic agent)",
        long,
        value_name = "N",
        requires = "synthetic",
        conflicts_with = "trace"
    )]
    pub synthetic_seed: Option<u64>,
}

impl ReplayArgs {
    /// The synthetic agent workload's parameters: the flags given, the documented defaults
    /// for the rest.
    pub fn agent_params(&self) -> ctxbench_trace::synthetic::AgentParams {
        let d = ctxbench_trace::synthetic::AgentParams::DEFAULT;
        ctxbench_trace::synthetic::AgentParams {
            sessions: self.sessions.unwrap_or(d.sessions),
            max_context: self.max_context.unwrap_or(d.max_context),
            turns: self.turns.unwrap_or(d.turns),
            think_s: self.think.unwrap_or(d.think_s),
            subagents: self.subagents.unwrap_or(d.subagents),
            seed: self.synthetic_seed.unwrap_or(d.seed),
        }
    }
}

/// `--timing`: how requests are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TimingArg {
    /// Open loop at the trace's timestamps.
    Trace,
    /// Per session: after the previous answer plus the trace's think time.
    Session,
}

/// `--synthetic`: which generated workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SyntheticArg {
    /// Agent sessions growing turn by turn, with think time and subagents.
    Agent,
}

/// A positive, finite factor or duration (`--scale`, `--speed`, `--max-gap`).
fn positive_factor(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("'{s}' is not a positive number")),
    }
}

/// A finite duration of zero or more seconds.
fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("'{s}' is not a number of seconds (0 or more)")),
    }
}

/// A positive token count; `k` means ×1024 (`32k`).
fn token_count(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (digits, mult) = match t.strip_suffix(['k', 'K']) {
        Some(d) => (d, 1024),
        None => (t, 1),
    };
    match digits.parse::<u64>().ok().and_then(|n| n.checked_mul(mult)) {
        Some(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "'{s}' is not a positive token count (e.g. 4096 or 32k)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_synthetic_defaults_the_help_states_are_the_generators() {
        // The help writes each default out (an Option, so `requires` holds); this keeps the
        // text and AgentParams::DEFAULT from drifting apart.
        let cmd = <crate::cmd::cli::Cli as clap::CommandFactory>::command();
        let replay = cmd.find_subcommand("replay").unwrap();
        let help = |id: &str| {
            let arg = replay.get_arguments().find(|a| a.get_id() == id).unwrap();
            arg.get_help().unwrap().to_string()
        };
        let d = ctxbench_trace::synthetic::AgentParams::DEFAULT;
        assert!(help("sessions").ends_with(&format!("[default: {}]", d.sessions)));
        assert!(help("max_context").ends_with(&format!("[default: {}k]", d.max_context / 1024)));
        assert!(help("turns").ends_with(&format!("[default: {}]", d.turns)));
        assert!(help("think").ends_with(&format!("[default: {}]", d.think_s)));
        assert!(help("subagents").ends_with(&format!("[default: {}]", d.subagents)));
        assert!(help("synthetic_seed").ends_with(&format!("[default: {}]", d.seed)));
    }

    #[test]
    fn token_counts_take_k_as_1024_and_refuse_zero() {
        assert_eq!(token_count("32k"), Ok(32 * 1024));
        assert_eq!(token_count("4096"), Ok(4096));
        assert!(token_count("0").is_err());
        assert!(token_count("-5").is_err());
        assert!(token_count("1.5k").is_err());
    }

    #[test]
    fn factors_must_be_positive_and_finite() {
        assert_eq!(positive_factor("0.25"), Ok(0.25));
        assert!(positive_factor("0").is_err());
        assert!(positive_factor("inf").is_err());
        assert!(non_negative("0").is_ok());
        assert!(non_negative("-1").is_err());
    }
}
