//! Command-line interface.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use ctxbench_client::BackendKind;
use ctxbench_session::bench::OnError;

pub use crate::cmd::replay_args::ReplayArgs;
use crate::cmd::replay_args::{REPLAY_EXAMPLES, REPLAY_USAGE};

/// Benchmark how an LLM inference server's speed changes with context length.
#[derive(Debug, Parser)]
#[command(name = "ctxbench", version = ctxbench_session::VERSION, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Measure TTFT, prefill and decode speed at each context length.
    #[command(after_help = SWEEP_EXAMPLES, override_usage = SWEEP_USAGE)]
    Sweep(Box<SweepArgs>),
    /// Measure ctxbench's own cost: stream tokens from a loopback server as fast as it can.
    Overhead(OverheadArgs),
    /// Tables, scaling fits, plots and an HTML report, from results files alone.
    #[command(after_help = REPORT_EXAMPLES)]
    Report(ReportArgs),
    /// Compare runs: B/A per context and metric, with confidence intervals and verdicts that
    /// take the run as the unit; `--fail-if-slower` gates CI.
    #[command(after_help = COMPARE_EXAMPLES)]
    Compare(CompareArgs),
    /// Read another tool's results (AIPerf, vllm bench, GuideLLM, inference-perf) into a
    /// ctxbench results file, and audit what they can prove.
    #[command(after_help = IMPORT_EXAMPLES)]
    Import(ImportArgs),
    /// Replay a request trace (Mooncake, Weka, TraceLab, Azure, ctxbench's own) or a
    /// synthetic agent workload, proving each request's prefix reuse.
    #[command(after_help = REPLAY_EXAMPLES, override_usage = REPLAY_USAGE)]
    Replay(Box<ReplayArgs>),
    /// Print a shell completion script to standard output.
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions(CompletionsArgs),
    /// Print a man page (ctxbench's, or one subcommand's), or write them all with --dir.
    #[command(after_help = MAN_EXAMPLES)]
    Man(ManArgs),
}

const COMPLETIONS_EXAMPLES: &str = "Examples:
  ctxbench completions bash > ~/.local/share/bash-completion/completions/ctxbench
  ctxbench completions zsh > ~/.zfunc/_ctxbench      # with fpath+=~/.zfunc before compinit
  ctxbench completions fish > ~/.config/fish/completions/ctxbench.fish";

const MAN_EXAMPLES: &str = "Examples:
  ctxbench man sweep | man -l -
  ctxbench man --dir ~/.local/share/man/man1          # ctxbench.1, ctxbench-sweep.1, ...";

/// Options of `ctxbench completions`.
#[derive(Debug, Args, Clone)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Options of `ctxbench man`.
#[derive(Debug, Args, Clone)]
pub struct ManArgs {
    /// The subcommand whose page to print (`sweep`, `report`, ...) [default: ctxbench's own].
    #[arg(value_name = "SUBCOMMAND", conflicts_with = "dir")]
    pub subcommand: Option<String>,

    /// Write every page (`ctxbench.1`, `ctxbench-<subcommand>.1`) into this folder instead.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

const REPORT_EXAMPLES: &str = "Examples:
  ctxbench report a.jsonl                               # table and fits on the terminal
  ctxbench report a.jsonl --format html --out a.html    # one self-contained HTML file
  ctxbench report a.jsonl b.jsonl --plots plots/        # SVG plots, runs overlaid";

const COMPARE_EXAMPLES: &str = "Examples:
  ctxbench compare before.jsonl after.jsonl
  ctxbench compare a.jsonl b.jsonl --format md --plot ab.svg
  ctxbench compare --a main-run*.jsonl --b pr-run*.jsonl --fail-if-slower 5%
  ctxbench compare plain.jsonl spec.jsonl --spec-plots plots/  # does speculation pay, up to which length?

Positional files: the first is the baseline A; every other file is compared with it, one run
against one run (a verdict needs at least 6 samples per side, and cannot see run-to-run drift).
With --a and --b: several runs per side (interleave them: A B A B ...); each run's median is one unit of
a Welch t-interval, at least 3 runs per side for a verdict.
Exit codes: 0 ok, 2 usage error, 3 --fail-if-slower found a regression.";

pub use ctxbench_render::ReportFormat;

/// Options of `ctxbench report`.
#[derive(Debug, Args, Clone)]
pub struct ReportArgs {
    /// Results files (JSON Lines written by `ctxbench sweep`).
    #[arg(required = true, value_name = "RESULTS.jsonl")]
    pub files: Vec<PathBuf>,

    /// Output format.
    #[arg(value_name = "FORMAT", long, value_enum, default_value = "table")]
    pub format: ReportFormat,

    /// Write the report here instead of to standard output (with `--format llmd-br`, a folder of documents).
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// Also write SVG plots into this folder.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,

    /// What the server costs, USD per hour: adds the price per million input and output
    /// tokens at each context length.
    ///
    /// Input tokens are priced from the cold prefill's median TTFT, output tokens from the
    /// median decode rate, one request at a time.
    #[arg(long, value_name = "USD", value_parser = positive_price)]
    pub price_per_hour: Option<f64>,

    /// The roofline: the machine's limits and the model's size.
    #[command(flatten)]
    pub roofline: RooflineArgs,
}

/// The machine's limits and the model's size, for the roofline: how far each decode step
/// and prefill is from what the hardware allows (docs/roofline.md).
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Roofline (how far from the hardware's limit)")]
pub struct RooflineArgs {
    /// Hold the run against an accelerator's limits: h100-sxm, h200, b200, a100-80gb, l40s, mi300x.
    ///
    /// The limits are its memory bandwidth and dense BF16 peak, from its data sheet
    /// (docs/roofline.md names each source); --memory-bandwidth and --peak-tflops override
    /// them.
    #[arg(long, value_name = "NAME", value_parser = accelerator)]
    pub hardware: Option<String>,

    /// Memory bandwidth in GB/s: the decode step's bound (for a CPU or hardware not in
    /// --hardware's table).
    ///
    /// A GB is 10⁹ bytes. Each decode step is held against (weight bytes + L × KV bytes per
    /// token) / bandwidth. Overrides --hardware's figure.
    #[arg(long, value_name = "GB/s", value_parser = positive_limit)]
    pub memory_bandwidth: Option<f64>,

    /// Peak TFLOPs (dense, of the type the model is served in): prefill MFU.
    ///
    /// Each prefill's FLOPs over its TTFT, as a fraction of this peak, is its MFU. Overrides
    /// --hardware's BF16 figure.
    #[arg(long, value_name = "N", value_parser = positive_limit)]
    pub peak_tflops: Option<f64>,

    /// The served model's Hugging Face config.json: layers, heads, KV heads, dtype.
    ///
    /// From num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim or
    /// hidden_size, torch_dtype, intermediate_size and vocab_size come the weight bytes, KV
    /// bytes per token and FLOPs per token, for any server; they complete what the server
    /// says of itself (llama.cpp's /v1/models meta). A sweep records the file in the results
    /// header.
    #[arg(long, value_name = "FILE")]
    pub model_config: Option<PathBuf>,
}

/// A `--hardware` name the table has (its error lists the table).
fn accelerator(s: &str) -> Result<String, String> {
    // clap names the flag and the value already: the table is what to add.
    ctxbench_stats::roofline::hardware::find(s)
        .map(|a| a.name.to_owned())
        .map_err(|e| {
            format!(
                "not a known accelerator; known: {} (for anything else, give --memory-bandwidth GB/s and --peak-tflops N)",
                e.known
            )
        })
}

/// A machine limit: a positive, finite number.
fn positive_limit(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("'{s}' is not a positive number")),
    }
}

/// A price per hour: a positive, finite number of dollars (`2.5`, `$2.50`).
fn positive_price(s: &str) -> Result<f64, String> {
    match s.trim_start_matches('$').parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!(
            "'{s}' is not a positive price in USD per hour, e.g. 2.50"
        )),
    }
}

const IMPORT_EXAMPLES: &str = "Examples:
  ctxbench import artifacts/profile_export_aiperf.json --out aiperf.jsonl
  ctxbench import vllm-bench-random-128.json vllm-bench-random-512.json --out vllm.jsonl
  ctxbench import guidellm/benchmarks.json --out guidellm.jsonl
  ctxbench compare aiperf.jsonl sweep.jsonl           # TTFT per length, side by side";

/// Options of `ctxbench import`.
#[derive(Debug, Args, Clone)]
pub struct ImportArgs {
    /// Result files of one tool (or the folders holding them); several are several points.
    #[arg(required = true, num_args = 1.., value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// The ctxbench results file to write (whole or not at all).
    #[arg(long, short = 'o', value_name = "RESULTS.jsonl")]
    pub out: PathBuf,
}

/// Options of `ctxbench compare`.
#[derive(Debug, Args, Clone)]
pub struct CompareArgs {
    /// Results files: the baseline A first, then one or more runs B, each compared with A.
    #[arg(
        num_args = 2..,
        value_name = "RESULTS.jsonl",
        required_unless_present = "a",
        conflicts_with_all = ["a", "b"]
    )]
    pub files: Vec<PathBuf>,

    /// Several runs of the baseline A (results files); the run is the unit of the test.
    #[arg(long, num_args = 1.., value_name = "RESULTS.jsonl", requires = "b")]
    pub a: Vec<PathBuf>,

    /// Several runs of B, compared with --a.
    #[arg(long, num_args = 1.., value_name = "RESULTS.jsonl", requires = "a")]
    pub b: Vec<PathBuf>,

    /// CI gate: exit with code 3 when any metric of B is significantly worse than A by more
    /// than this (`5%` or `0.05`).
    ///
    /// The metrics that failed are printed. Warm runs' cells (TTFT_inc per L + N, and tier)
    /// are gated too. Cells without a verdict (too few runs or samples) never fail the gate.
    #[arg(long, value_name = "PERCENT")]
    pub fail_if_slower: Option<String>,

    /// Output format.
    #[arg(value_name = "FORMAT", long, value_enum, default_value = "table")]
    pub format: ReportFormat,

    /// Write the comparison here instead of to standard output.
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,

    /// Also write an SVG plot of the ratios here.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,

    /// Compare the common points even when the runs' context points, corpus, seed, output
    /// length or method differ.
    #[arg(long)]
    pub allow_mismatch: bool,

    /// Confidence level of the intervals.
    #[arg(value_name = "LEVEL", long, default_value_t = 0.95)]
    pub confidence: f64,

    /// Noise band as a fraction: a change is called faster or slower only when its whole
    /// interval lies beyond ±noise (runs drift by a few percent on a real host).
    #[arg(value_name = "FRACTION", long, default_value_t = 0.05)]
    pub noise: f64,

    /// Runs per side needed for a verdict when a side has several runs.
    #[arg(value_name = "N", long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=1_000_000))]
    pub min_runs: u32,

    /// Samples per side needed for a verdict when each side is one run.
    #[arg(value_name = "N", long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(2..=1_000_000))]
    pub min_samples: u32,

    /// Which side runs speculative decoding, for the "does speculation pay" answer.
    ///
    /// The answer gives the net decode speedup, TTFT cost, acceptance and L* per context
    /// length. `auto` takes the side whose samples report acceptance; `a` or `b` say so;
    /// `off` leaves it out.
    #[arg(value_name = "SIDE", long, value_enum, default_value = "auto")]
    pub spec_side: ctxbench_stats::stats::speculation::SpecSide,

    /// Also write the speculation plots (speedup.svg, acceptance.svg) into this folder.
    #[arg(long, value_name = "DIR")]
    pub spec_plots: Option<PathBuf>,

    /// The roofline: each side's fraction of the hardware's limit, side by side.
    #[command(flatten)]
    pub roofline: RooflineArgs,
}

// Written out: clap's generated line lists whichever required and given options an error
// involved (`ctxbench sweep --url <URL> --corpus <...>` for an unknown flag), which reads as
// if those were needed.
const SWEEP_USAGE: &str = "ctxbench sweep --url URL [OPTIONS]
       ctxbench sweep --server-cmd TEMPLATE [-L NAME VALUES]... [-F NAME FLAGS]... [OPTIONS]";

const SWEEP_EXAMPLES: &str = "Examples:
  ctxbench sweep --url http://127.0.0.1:8080
  ctxbench sweep --url http://gpu-box:30000 --contexts 1k,8k,32k,128k --reps 3 --out a.jsonl
  ctxbench sweep --url http://127.0.0.1:8080 --out a.jsonl --resume      # continue a run
  ctxbench sweep --server-cmd 'llama-server -m m.gguf --port {port} -t {t}' -L t 1,2 \
      --runs 5 --contexts 1k,16k --out ab/                                 # A/B campaign
  ctxbench sweep --server-cmd 'llama-server -m t.gguf --port {port} {spec}' \
      -F spec ',-md d.gguf --spec-type draft-simple' --runs 3 --out spec/  # does speculation pay?

k means ×1024: 4k = 4096 tokens. Results: one JSON line per sample (docs/results-schema.md).";

/// Options of `ctxbench sweep`.
#[derive(Debug, Args, Clone)]
pub struct SweepArgs {
    /// Server base URL, without /v1.
    #[arg(
        value_name = "URL",
        help_heading = "Server",
        long,
        env = "CTXBENCH_URL",
        required_unless_present = "server_cmd"
    )]
    pub url: Option<String>,

    /// Start the server yourself: a command with `{port}`, and `{NAME}` for each -L list.
    ///
    /// ctxbench puts the free port it picked in `{port}`, waits until the server is ready,
    /// sweeps, stops it (SIGTERM, then SIGKILL) and logs its output beside the results. --out
    /// is then a folder: one results file per variant and run.
    #[arg(
        help_heading = "Campaigns (--server-cmd)",
        long,
        value_name = "TEMPLATE",
        allow_hyphen_values = true
    )]
    pub server_cmd: Option<String>,

    /// With --server-cmd: `-L NAME V1,V2,...`, one variant per value.
    ///
    /// As in hyperfine: several lists make a grid, the first changing fastest; `\,` is a
    /// literal comma.
    #[arg(
        help_heading = "Campaigns (--server-cmd)",
        short = 'L',
        long = "parameter-list",
        num_args = 2,
        value_names = ["NAME", "VALUES"],
        action = clap::ArgAction::Append,
        requires = "server_cmd",
        allow_hyphen_values = true
    )]
    pub parameter_list: Vec<String>,

    /// With --server-cmd: `-F NAME ',FLAGS1,FLAGS2'`, one variant per group of flags.
    ///
    /// Each group is put where the word `{NAME}` stands (split like a shell does); an empty
    /// group adds no flags. Speculation on against off: `-F spec ',-md draft.gguf --spec-type
    /// draft-simple'`.
    #[arg(
        help_heading = "Campaigns (--server-cmd)",
        short = 'F',
        long = "flag-list",
        num_args = 2,
        value_names = ["NAME", "FLAGS"],
        action = clap::ArgAction::Append,
        requires = "server_cmd",
        allow_hyphen_values = true
    )]
    pub flag_list: Vec<String>,

    /// With --server-cmd: speculation's flags, added to each variant whose draft length K
    /// is above 0; K = 0 is the server without them.
    ///
    /// They hold one `{NAME}` of a `-L` list of whole numbers, the draft length K: `-L k
    /// 0,2,4,8 --spec-flags '-md draft.gguf --spec-draft-n-max {k}'`. With --concurrency,
    /// `report --format schedule` then picks K per length and batch (docs/speculation.md).
    #[arg(
        help_heading = "Campaigns (--server-cmd)",
        long,
        value_name = "FLAGS",
        requires = "server_cmd",
        allow_hyphen_values = true
    )]
    pub spec_flags: Option<String>,

    /// With --server-cmd: runs of each variant, interleaved, each on a fresh server.
    ///
    /// Interleaved as A B A B ...; the comparison takes the run as its unit (3 or more for a
    /// verdict).
    #[arg(value_name = "N", help_heading = "Campaigns (--server-cmd)", long, default_value_t = 1, requires = "server_cmd", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub runs: u32,

    /// With --server-cmd: the variant the others are compared with [default: the first].
    ///
    /// NAME is the variant's short name (`t=2`, `default`).
    #[arg(
        help_heading = "Campaigns (--server-cmd)",
        long,
        value_name = "NAME",
        requires = "server_cmd"
    )]
    pub baseline: Option<String>,

    /// With --server-cmd: seconds a server may take to become ready.
    #[arg(
        help_heading = "Campaigns (--server-cmd)",
        long,
        default_value_t = 600.0,
        value_name = "SECONDS",
        requires = "server_cmd"
    )]
    pub server_timeout: f64,

    /// Set by the campaign for each run it starts: the variant's command line (with
    /// `{port}`), recorded in the results header.
    #[arg(skip)]
    pub managed_cmd: Option<String>,

    /// Server protocol; `auto` probes the server and says what it chose.
    #[arg(
        value_name = "PROTOCOL",
        help_heading = "Server",
        long,
        value_enum,
        default_value = "auto"
    )]
    pub backend: BackendKind,

    /// OpenAI protocol only: `completions`, `chat` or `auto`.
    ///
    /// `completions` sends a raw prompt to /v1/completions. `chat` sends one user message to
    /// /v1/chat/completions: the chat template's tokens are measured and counted in every
    /// length, and TTFT is taken on the first chunk with generated content, not the role
    /// chunk. `auto` uses completions, chat when /v1/completions answers 404. Lengths are
    /// exact with token ids or a tokenizer endpoint pair (/tokenize, /v1/tokenize,
    /// /extras/tokenize with their detokenize); with neither (a gateway or hosted API) they
    /// are calibrated against the server's usage.prompt_tokens, within 1%.
    #[arg(
        value_name = "ENDPOINT",
        help_heading = "Server",
        long,
        value_enum,
        default_value = "auto"
    )]
    pub endpoint: ctxbench_client::openai::EndpointChoice,

    /// Context lengths in tokens, e.g. `1k,4k,32k` [default: 1k, 2k, 4k, … up to the
    /// server's maximum minus a 10% margin].
    #[arg(
        help_heading = "What to measure",
        long,
        value_name = "LIST",
        allow_hyphen_values = true
    )]
    pub contexts: Option<String>,

    /// Warm context at depth instead of the cold sweep: `append`, `conversation`, `tiers` or
    /// `retention`.
    ///
    /// `append` puts a prefix of L tokens from the --contexts ladder in the cache, then sends
    /// L + N with N from --append, beside the cold prefill of L + N. `conversation` grows one
    /// conversation by --turn-tokens and its generated answer per turn, up to the server's
    /// maximum. `tiers` measures each cache tier at each L: on llama-server with -np 1 the
    /// live cache, --cache-ram host memory, slot save/restore from --slot-save-path, and cold
    /// recompute; on SGLang the live cache, HiCache host memory after evicting the prefix
    /// from the device pool, and cold. `retention` primes a prefix at each L, then waits an
    /// idle gap from --gaps or sends foreign traffic from --pressure, then sends the append:
    /// the map of when the cache forgets (docs/retention.md). Every warm sample proves its
    /// reuse from the server's cached-token count; a miss is flagged cache_miss and kept out
    /// of the summaries.
    #[arg(
        help_heading = "Warm modes",
        long,
        value_enum,
        value_name = "append|conversation|tiers|retention"
    )]
    pub mode: Option<ctxbench_schema::warm::WarmMode>,

    /// With --mode append or tiers: new tokens appended to each cached prefix (N)
    /// [default: 128,512,2048].
    ///
    /// A comma list; --mode tiers uses its first value.
    #[arg(help_heading = "Warm modes", long, value_name = "LIST")]
    pub append: Option<String>,

    /// With --mode retention: idle seconds between the prime and the append
    /// [default: 0,1,10,60,300].
    ///
    /// A list, e.g. `0,1,10,60,300`: each gap is a column of the retention map (at pressure
    /// 0). Gaps of different sessions overlap where the server has room for several prefixes
    /// (llama-server slots), so the map costs the longest gaps, not their sum.
    #[arg(help_heading = "Warm modes", long, value_name = "LIST")]
    pub gaps: Option<String>,

    /// With --mode retention: foreign traffic between the prime and the append, as fractions
    /// of the server's KV pool [default: 0,0.25,0.5,1,2].
    ///
    /// A list, e.g. `0,0.25,0.5,1,2`: other prompts, each with its own prefix, totalling that
    /// fraction of the pool (SGLang max_total_num_tokens, vLLM num_gpu_blocks × block size,
    /// llama.cpp slots × context; otherwise one context of tokens, noted), each counted by
    /// the server. Each value is a column of the map (at gap 0).
    #[arg(help_heading = "Warm modes", long, value_name = "LIST")]
    pub pressure: Option<String>,

    /// With --mode retention: measure every gap × every pressure, not the two axes apart.
    ///
    /// Without it the map is the gaps at pressure 0 and the pressures at gap 0. With it each
    /// cell off both axes primes, sends its foreign traffic at once, and appends when its gap
    /// is over; such cells run alone (another session's traffic would be pressure on them),
    /// so their gaps add up: the plan says by how much before it starts.
    #[arg(help_heading = "Warm modes", long)]
    pub grid: bool,

    /// With --mode conversation: tokens of each new user turn [default: 512].
    #[arg(help_heading = "Warm modes", long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub turn_tokens: Option<u64>,

    /// With --mode append: the turn budget, the largest N whose median TTFT stays under
    /// this many milliseconds at each L.
    #[arg(help_heading = "Warm modes", long, value_name = "MS")]
    pub ttft_target: Option<f64>,

    /// With --mode append or conversation: the negative control.
    ///
    /// The warm requests ask the server not to reuse its cache (llama.cpp cache_prompt: false):
    /// the savings must vanish and every warm sample be flagged cache_miss.
    #[arg(help_heading = "Warm modes", long)]
    pub negative_control: bool,

    /// Requests sent together at each context, e.g. `1,2,4,8`: the capacity map (context ×
    /// concurrency).
    ///
    /// Each cell sends c cold requests of exactly the context length, each with its own nonce,
    /// released together; a repetition repeats the whole wave. A level of 1 measures one
    /// request at a time. With --mode append: c sessions at once, each appending to its own
    /// cached prefix (on llama-server give each a slot: -np c).
    #[arg(
        help_heading = "What to measure",
        long,
        value_name = "LIST",
        default_value = "1"
    )]
    pub concurrency: String,

    /// Output tokens per request when --concurrency has a level above 1 [default: 128].
    ///
    /// Every cell of the grid, 1 included, so cells compare. Longer than --output-tokens on
    /// purpose: the concurrent decode rate is timed only in the window where all c requests
    /// decode at once (last first token to first last token), and with short outputs the first
    /// request finishes before the last one starts, leaving no window to time.
    #[arg(help_heading = "What to measure", long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=1_000_000))]
    pub wave_output_tokens: Option<u32>,

    /// Tokens to generate per request (EOS ignored).
    #[arg(value_name = "N", help_heading = "What to measure", long, default_value_t = 32, allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(2..=1_000_000))]
    pub output_tokens: u32,

    /// Distinct prompts per context length, each measured --reps times.
    ///
    /// Each prompt is a different corpus window. With --precision, --min-reps and --max-reps
    /// count per prompt. The report splits the spread between prompts from the noise between
    /// repetitions. Default: every repetition reads its own window (K = repetitions, one
    /// each).
    #[arg(help_heading = "Prompts and corpus", long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub prompts: Option<u32>,

    /// Measured repetitions per context length (fixed; see --precision for adaptive).
    #[arg(value_name = "N", help_heading = "What to measure", long, default_value_t = 3, conflicts_with = "precision", allow_negative_numbers = true, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub reps: u32,

    /// Adaptive repetitions: repeat each point until its 95% interval is within ±P (e.g. 0.05).
    ///
    /// The interval is the 95% confidence interval of the median TTFT and decode rate; P =
    /// 0.05 means ±5%. Repetitions stay between --min-reps and --max-reps, within the time
    /// budgets.
    #[arg(help_heading = "What to measure", long, value_name = "P")]
    pub precision: Option<f64>,

    /// With --precision: repetitions always taken.
    #[arg(value_name = "N", help_heading = "What to measure", long, default_value_t = 3, requires = "precision", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub min_reps: u32,

    /// With --precision: repetitions never exceeded [default: 30; with --precision-of pNN,
    /// 3 × the samples that percentile's interval needs: 87 for p90, 177 for p95].
    #[arg(value_name = "N", help_heading = "What to measure", long, requires = "precision", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_reps: Option<u32>,

    /// With --precision: the figure P bounds: `median` (default) or a percentile, e.g. p90.
    ///
    /// With a percentile, each point is measured until the 95% interval of its p90 TTFT and
    /// its p90 step time (distribution-free, from order statistics, the one the report's tails
    /// use) is within ±P. That interval needs a least n (29 for p90, 59 for p95, 299 for
    /// p99): every point takes at least that many, --max-reps below it is refused, and
    /// --max-reps defaults to 3 × it. With --design auto, every length is measured to that
    /// floor (no prediction) and judged on its own order statistics. Not with --concurrency.
    #[arg(
        help_heading = "What to measure",
        long,
        value_name = "WHICH",
        requires = "precision"
    )]
    pub precision_of: Option<String>,

    /// With --precision: seconds one context point may take beyond --min-reps.
    #[arg(
        help_heading = "What to measure",
        long,
        value_name = "SECONDS",
        requires = "precision"
    )]
    pub point_budget: Option<f64>,

    /// With --precision: seconds the whole run may take; then points get --min-reps only
    /// (with --design auto: one sample each, kept in reserve from the start).
    #[arg(
        help_heading = "What to measure",
        long,
        value_name = "SECONDS",
        requires = "precision"
    )]
    pub run_budget: Option<f64>,

    /// With --precision: ctxbench designs the sweep (which length takes how many samples).
    ///
    /// `auto`: cheap lengths first, then the longest, then the ones between, one sample per
    /// length per pass (so each length's samples span the run, and a drift of the server's
    /// speed shows as spread); a noise model shared across lengths (the relative spread of TTFT
    /// and decode rate, pooled over the cheap lengths and checked at every other); each length
    /// takes the samples that bring its median TTFT, prefill and decode rate within ±P at 95%
    /// (at least 2; a length noisier than the model is judged on its own samples and says why),
    /// cheap lengths take extra samples while they save more server time at the expensive ones,
    /// and the longest takes more while the fits' extrapolation to the server's maximum is over
    /// ±P and they narrow it. The longest length is always measured; a length between may be
    /// predicted from the fits when the prediction, model error included, is within ±P (it is
    /// marked predicted everywhere, and never compared or gated). Where ±P is out of reach
    /// within --max-reps, a length takes a --reps 6 sweep's samples and says what precision
    /// the host allows. The end report gives the server time spent beside the fixed --reps 3
    /// and --reps 6 sweeps. Not with --min-reps, --prompts, --concurrency, --mode or
    /// --method two-point.
    #[arg(
        help_heading = "What to measure",
        long,
        value_enum,
        value_name = "MODE",
        requires = "precision",
        conflicts_with_all = ["min_reps", "prompts"]
    )]
    pub design: Option<DesignArg>,

    /// Print the plan (points, prompt sizes, predicted duration) and peak memory, measure
    /// nothing.
    ///
    /// The prediction comes from two small calibration requests (not recorded).
    #[arg(help_heading = "What to measure", long)]
    pub dry_run: bool,

    /// Prompt text: `auto`, `repeat`, `random`, `natural`, `code`, or your own file or folder;
    /// a comma list measures each.
    ///
    /// `auto` (the default) is text that does not repeat itself where the server is known to
    /// speculate (a speculative flag in --server-cmd or its -F/-L values, or SGLang's probe):
    /// `natural` when the longest context is at most 128k, else `code` (also when the lengths
    /// are not known before the server is asked); `repeat` elsewhere. `repeat` is one sentence
    /// repeated (it inflates speculative acceptance), `random` random token ids, `natural`
    /// English prose already on this machine (Python's own documentation,
    /// pydoc_data/topics.py, ~180k tokens), `code` the Python standard library's source on
    /// this machine (millions of tokens: never wraps); a file or folder holds text of your
    /// own. With a list (`repeat,natural,code`), the same ladder is measured once per corpus,
    /// into one results file each (OUT.repeat.jsonl, …), and the report gives the acceptance
    /// inflation.
    #[arg(
        help_heading = "Prompts and corpus",
        long,
        default_value = "auto",
        value_name = "auto|repeat|random|natural|code|PATH[,…]"
    )]
    pub corpus: String,

    /// Seed for `--corpus random` (nonces are always fresh).
    #[arg(
        value_name = "N",
        help_heading = "Prompts and corpus",
        long,
        default_value_t = 0
    )]
    pub seed: u64,

    /// Results file (JSON Lines) [default: ctxbench-<UTC time>.jsonl].
    #[arg(value_name = "FILE", help_heading = "Output", long, short)]
    pub out: Option<PathBuf>,

    /// What this run is, e.g. the server flag under test ("-t 2").
    ///
    /// Any text will do ("draft window 4096"); reports and comparisons name the run by it.
    #[arg(
        help_heading = "Output",
        long,
        value_name = "TEXT",
        allow_hyphen_values = true
    )]
    pub label: Option<String>,

    /// Continue the run in --out, skipping samples already recorded.
    #[arg(help_heading = "Output", long)]
    pub resume: bool,

    /// Model name sent in OpenAI requests [default: the first of /v1/models].
    #[arg(value_name = "NAME", help_heading = "Server", long)]
    pub model: Option<String>,

    /// Name of the environment variable holding the API key (sent as a Bearer token).
    #[arg(
        help_heading = "Server",
        long,
        default_value = "CTXBENCH_API_KEY",
        value_name = "NAME"
    )]
    pub api_key_env: String,

    /// PEM file of a private certificate authority for HTTPS.
    #[arg(help_heading = "Server", long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,

    /// Allowed difference between the server's prompt count and the target.
    ///
    /// None is needed: prompts are sent as token ids and the server's BOS is measured by the
    /// warmup, so any difference means the server changed the prompt.
    #[arg(
        value_name = "TOKENS",
        help_heading = "Prompts and corpus",
        long,
        default_value_t = 0
    )]
    pub length_tolerance: u64,

    /// Request timeout: SECONDS plus --timeout-per-1k for every 1000 context tokens.
    ///
    /// A floor, not a cap: once the server has been measured (by the warmup's pace until a
    /// point is measured, then by the cost model), a request is allowed at least SECONDS plus
    /// 4× its predicted cost; the unmeasured warmup and calibration requests get at least
    /// 60 s. After a request times out, the next sample waits for the server to read idle
    /// where it exposes its load (--idle-wait), and the run says so where it cannot know.
    #[arg(
        help_heading = "Timeouts and errors",
        long,
        default_value_t = 60.0,
        value_name = "SECONDS",
        allow_negative_numbers = true
    )]
    pub timeout: f64,

    /// Extra request timeout per 1000 context tokens.
    #[arg(
        help_heading = "Timeouts and errors",
        long,
        default_value_t = 5.0,
        value_name = "SECONDS",
        allow_negative_numbers = true
    )]
    pub timeout_per_1k: f64,

    /// Longest silence allowed once the server has started answering.
    #[arg(
        help_heading = "Timeouts and errors",
        long,
        default_value_t = 60.0,
        value_name = "SECONDS",
        allow_negative_numbers = true
    )]
    pub stall_timeout: f64,

    /// What to do when a request fails (a dead server always stops the sweep).
    #[arg(
        value_name = "POLICY",
        help_heading = "Timeouts and errors",
        long,
        value_enum,
        default_value = "continue"
    )]
    pub on_error: OnError,

    /// Trap demonstration: `off` lets the server reuse cached prompts.
    ///
    /// On llama.cpp the switch is `cache_prompt`. Samples that hit the cache are flagged and
    /// excluded.
    #[arg(
        value_name = "SWITCH",
        help_heading = "Cache defence",
        long,
        value_enum,
        default_value = "on"
    )]
    pub cache_bypass: Switch,

    /// Trap demonstration: `off` drops the per-request nonce.
    ///
    /// Repetitions then send identical prompts, which a server may answer from its prefix
    /// cache. Where the server reports no cached-token count, a sample whose TTFT is below 1/4
    /// of the slowest other sample at its length (or of the median at the next shorter length)
    /// is flagged suspected_cache_hit and excluded: a reuse of more than about 3/4 of the
    /// prompt; a partial reuse (e.g. half) is not caught.
    #[arg(
        value_name = "SWITCH",
        help_heading = "Cache defence",
        long,
        value_enum,
        default_value = "on"
    )]
    pub nonce: Switch,

    /// How a sample is timed: `stream`, timestamps as bytes arrive (primary), or `two-point`.
    ///
    /// `two-point`: the classic difference method, non-streamed requests of --two-point-tokens
    /// A and B tokens, decode = (B − A)/(t_B − t_A), each request with its own nonce; a sample
    /// where t_B ≤ t_A is flagged with the reason.
    #[arg(
        value_name = "METHOD",
        help_heading = "What to measure",
        long,
        value_enum,
        default_value = "stream"
    )]
    pub method: Method,

    /// max_tokens of the two requests of `--method two-point` [default: 1,17].
    #[arg(help_heading = "What to measure", long, value_name = "A,B")]
    pub two_point_tokens: Option<String>,

    /// Decode at depth: K more requests with each cold sample's prompt, reusing its prefix.
    ///
    /// They follow the cold sample and reuse its prefix on purpose; they are recorded with
    /// phase `warm` and summarised apart.
    #[arg(help_heading = "What to measure", long, default_value_t = 0, value_name = "K", value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub decode_samples: u32,

    /// Seed the prompts, so that another run with the same seed sends identical prompts.
    ///
    /// The seed covers nonces and needle values too; the other options must match. `compare`
    /// then reports how many greedy outputs agree. The cache defence still holds (flush,
    /// per-request switch, verified cached-token counts; a reused prompt that hits a cache is
    /// flagged, never counted).
    #[arg(help_heading = "Prompts and corpus", long, value_name = "N")]
    pub prompt_seed: Option<u64>,

    /// Retrieval checks: a fact with a random value at each depth; the answer must hold it.
    ///
    /// At each context, after the speed samples, one extra cold prompt per depth holds a
    /// short fact with a random 5-digit value ("The secret number is …") and ends with a
    /// question ("… Answer: The secret number is"). The prompt is plain text for the
    /// completions API, no chat template, so base and instruction-tuned models both continue
    /// it; the answer is greedy. Recorded with phase `needle`, never in the speed summaries;
    /// a failed request is an error, not a fail.
    #[arg(help_heading = "What to measure", long)]
    pub needle: bool,

    /// Depths of the needle checks, percent of the prompt before the fact.
    #[arg(
        help_heading = "What to measure",
        long,
        default_value = "10,50,90",
        value_name = "PCT,...",
        requires = "needle"
    )]
    pub needle_depths: String,

    /// Flush the server's prefix cache before every measured request.
    ///
    /// `auto` flushes when the server has a flush endpoint (SGLang /flush_cache, vLLM
    /// /reset_prefix_cache, llama.cpp slot erase), `always` fails if it cannot, `never` does
    /// not flush. The nonce and the cached-token check stay on regardless.
    #[arg(
        value_name = "MODE",
        help_heading = "Cache defence",
        long,
        value_enum,
        default_value = "auto"
    )]
    pub flush: FlushMode,

    /// Seconds a flush refused because the server is busy is retried.
    ///
    /// While another request runs, SGLang refuses with 400 and vLLM with `success: false`.
    /// The retries back off; when the time runs out the sample is measured anyway and flagged
    /// flush_failed. Flushing stays on either way.
    #[arg(
        help_heading = "Cache defence",
        long,
        value_name = "SECONDS",
        default_value_t = 120.0
    )]
    pub flush_wait: f64,

    /// Check that the server is idle around every measured request.
    ///
    /// ctxbench reads what the server exposes: llama.cpp /slots, SGLang /v1/loads, vLLM's
    /// running/waiting gauges, and the request counters of /metrics. `auto` waits for idle
    /// before each sample and flags a sample another client's work overlapped (foreign_load,
    /// kept out of the summaries and taken again); `off` checks nothing.
    #[arg(
        value_name = "MODE",
        help_heading = "Cache defence",
        long,
        value_enum,
        default_value = "auto"
    )]
    pub idle_check: IdleCheckMode,

    /// Seconds to wait for a busy server to be idle before each sample.
    ///
    /// When the time runs out the sample is measured anyway and flagged idle_wait_expired and
    /// foreign_load.
    #[arg(
        help_heading = "Cache defence",
        long,
        value_name = "SECONDS",
        default_value_t = 120.0
    )]
    pub idle_wait: f64,

    /// Prometheus endpoint scraped before and after each sample [default: the server's
    /// /metrics when it answers].
    ///
    /// A path (`/metrics`) is relative to --url; `off` disables scraping.
    #[arg(help_heading = "Cache defence", long, value_name = "URL|PATH|off")]
    pub metrics_url: Option<String>,

    /// A worker behind the router at --url, read and flushed by ctxbench itself (repeatable).
    ///
    /// Give the worker's base URL, once per worker. Workers the router lists itself (vllm-router's
    /// /list_workers, sglang-router's /workers) are added without it. Behind a router, the
    /// idle guard reads every worker's /slots and generated-token counter before and after
    /// each sample, the flush erases each worker's slots, and each sample records the worker
    /// that served it; work a worker did that the sample does not account for flags it
    /// foreign_load. See docs/fleets.md.
    #[arg(help_heading = "Cache defence", long, value_name = "URL")]
    pub worker: Vec<String>,

    /// A server with the same model whose tokenizer endpoints ctxbench may use (for a gateway
    /// that hides its own).
    ///
    /// For a gateway such as the LiteLLM proxy, give the server behind it. Prompts become token
    /// ids of exact length where the measured server takes ids, else text of exact length;
    /// without it such a server gets calibrated text.
    #[arg(help_heading = "Server", long, value_name = "URL")]
    pub tokenizer_url: Option<String>,

    /// Seconds to wait for a server that is not accepting connections yet or is still
    /// loading its model.
    #[arg(
        help_heading = "Server",
        long,
        default_value_t = 60.0,
        value_name = "SECONDS",
        allow_negative_numbers = true
    )]
    pub wait_ready: f64,

    /// Only warnings and the final table.
    #[arg(help_heading = "Output", long, short)]
    pub quiet: bool,

    /// What the server costs, USD per hour: the end report adds the price per million tokens.
    ///
    /// Input and output tokens apart, at each context length, as `ctxbench report` does.
    #[arg(help_heading = "Output", long, value_name = "USD", value_parser = positive_price)]
    pub price_per_hour: Option<f64>,

    /// The roofline of the end report, and `--model-config` recorded in the header.
    #[command(flatten)]
    pub roofline: RooflineArgs,
}

/// `--design`: how a `--precision` sweep chooses its repetitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DesignArg {
    /// A noise model shared across lengths decides every length's samples.
    Auto,
}

/// How a sample is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Streamed, timestamps as bytes arrive.
    Stream,
    /// Two non-streamed requests of different lengths.
    TwoPoint,
}

/// When to flush the server's prefix cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlushMode {
    /// Flush where the server allows it; say so once where it does not.
    Auto,
    /// Flush before every sample; stop if the server cannot.
    Always,
    /// Never flush.
    Never,
}

/// Whether the idle state is checked around every sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IdleCheckMode {
    /// Read what the server exposes; say once where it exposes nothing.
    Auto,
    /// Check nothing.
    Off,
}

/// An on/off switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Switch {
    /// Enabled.
    On,
    /// Disabled.
    Off,
}

impl Switch {
    /// `true` for `on`.
    pub fn is_on(self) -> bool {
        self == Switch::On
    }
}

/// Options of `ctxbench overhead`.
#[derive(Debug, Clone, Args)]
pub struct OverheadArgs {
    /// Tokens streamed per run.
    #[arg(value_name = "N", long, default_value_t = 200_000)]
    pub tokens: u32,
    /// Runs (the median is reported).
    #[arg(value_name = "N", long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub runs: u32,
    /// Concurrent streams (many-streams mode).
    ///
    /// --tokens is split between them, and the client's CPU is the whole process's minus the
    /// loopback server's thread.
    #[arg(value_name = "N", long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub streams: u32,
}
