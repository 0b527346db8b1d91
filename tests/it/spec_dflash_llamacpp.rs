//! DFlash (block-diffusion) speculative decoding on the real reference llama-server: the tiny
//! target with a tiny DFlash draft `scripts/reference-server` writes (the repeat-last one: it
//! proposes the block's anchor at every position, so the target accepts where it repeats its
//! last token — now and then, as the text goes). What is checked is that ctxbench's draft,
//! accepted and step counts are the server's own, sample by sample, at every length.

use crate::common;

use common::{ref_paths, serial, sweep, RefServer};
use ctxbench_schema::record::Status;

/// The tokens DFlash may draft per step: the test's `--spec-draft-n-max` (under the draft's
/// block size 16, whose limit is 15).
const N_MAX: u64 = 8;
/// Output tokens per request: enough steps for full blocks and for the shortened last ones.
const OUTPUT: u64 = 40;

/// One request as llama-server logged it (`LLAMA_TRACE=1` logs every verify step).
#[derive(Debug, Default)]
struct LoggedTask {
    prompt_n: Option<u64>,
    eval_n: Option<u64>,
    /// `accepted k/n draft tokens`, one per verify step.
    steps: Vec<(u64, u64)>,
    /// `draft acceptance = r (a accepted / g generated), mean len = m`.
    summary: Option<(f64, u64, u64, f64)>,
}

fn number_after(line: &str, key: &str) -> Option<f64> {
    let rest = &line[line.find(key)? + key.len()..];
    let n: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    n.parse().ok()
}

/// The server log's requests, in the order they started.
fn logged_tasks(log: &str) -> Vec<LoggedTask> {
    let mut order: Vec<u64> = Vec::new();
    let mut tasks: std::collections::HashMap<u64, LoggedTask> = Default::default();
    for line in log.lines() {
        let Some(id) = number_after(line, "| task ").map(|x| x as u64) else {
            continue;
        };
        let t = tasks.entry(id).or_insert_with(|| {
            order.push(id);
            LoggedTask::default()
        });
        if line.contains("prompt eval time") {
            t.prompt_n = number_after(line, "ms /").map(|x| x as u64);
        } else if line.contains("       eval time") {
            t.eval_n = number_after(line, "ms /").map(|x| x as u64);
        } else if let Some(p) = line
            .find("accepted ")
            .filter(|_| line.contains("draft tokens"))
        {
            // "accepted  0/ 8 draft tokens"
            let rest = &line[p + "accepted ".len()..];
            let (k, n) = rest.split_once('/').expect("k/n");
            let n = n.split_whitespace().next().unwrap();
            t.steps
                .push((k.trim().parse().unwrap(), n.trim().parse().unwrap()));
        } else if line.contains("draft acceptance =") {
            t.summary = Some((
                number_after(line, "draft acceptance =").unwrap(),
                number_after(line, "(").unwrap() as u64,
                number_after(line, "accepted /").unwrap() as u64,
                number_after(line, "mean len =").unwrap(),
            ));
        }
    }
    order
        .into_iter()
        .map(|id| tasks.remove(&id).unwrap())
        .collect()
}

#[test]
fn dflash_counts_agree_with_the_servers_own_at_every_length() {
    let _g = serial();
    let draft = ref_paths().dflash_repeat_draft.to_str().unwrap();
    counts_agree_with_the_server_log(draft, &["512", "1k", "2k"], 2);
}

#[test]
fn the_random_dflash_draft_borrowing_the_targets_head_counts_alike() {
    // The published drafts' layout: no embeddings or output head of its own (the target's
    // are lent through the draft context's link to it).
    let _g = serial();
    let draft = ref_paths().dflash_draft.to_str().unwrap();
    counts_agree_with_the_server_log(draft, &["512"], 1);
}

/// Sweeps a DFlash server at `contexts` and checks every sample's counts against the
/// server's own log and timings.
fn counts_agree_with_the_server_log(draft: &str, contexts: &[&str], reps: u32) {
    let srv = RefServer::start_env(
        8192,
        &[
            "-md",
            draft,
            "--spec-type",
            "draft-dflash",
            "--spec-draft-n-max",
            &N_MAX.to_string(),
        ],
        &[("LLAMA_TRACE", "1")],
    );
    let run = sweep(
        &srv.url(),
        &[
            "--contexts",
            &contexts.join(","),
            "--reps",
            &reps.to_string(),
            "--output-tokens",
            &OUTPUT.to_string(),
            // Counts, not speed, are checked: a loaded host must not time a request out.
            "--timeout",
            "600",
        ],
    )
    .ok();
    let log = std::fs::read_to_string(&srv.log).unwrap();
    assert!(
        log.contains("adding speculative implementation 'draft-dflash'"),
        "the server did not run DFlash: {log}"
    );
    let r = run.results();
    assert_eq!(r.samples.len(), contexts.len() * reps as usize);

    // Each sample is the next logged request with its prompt and output lengths (the warmup
    // and negotiation requests in between are shorter).
    let mut tasks = logged_tasks(&log).into_iter();
    println!("context  draft  accepted  draft steps  verify steps  accept rate  accept length │ server: draft  accepted  verify steps  mean len");
    let mut lengths = std::collections::BTreeSet::new();
    for s in &r.samples {
        assert_eq!(s.status, Status::Ok, "{s:?}");
        let server = s.server.as_ref().expect("timings");
        let task = tasks
            .by_ref()
            .find(|t| t.prompt_n == server.prompt_n && t.eval_n == s.output_tokens)
            .unwrap_or_else(|| panic!("no logged request for {s:?}"));
        let drafted: u64 = task.steps.iter().map(|x| x.1).sum();
        let accepted: u64 = task.steps.iter().map(|x| x.0).sum();
        let (rate, sum_acc, sum_gen, mean_len) = task.summary.expect("draft acceptance line");
        // The log's steps add up to its summary and to the response's timings.
        assert_eq!((sum_acc, sum_gen), (accepted, drafted));
        assert_eq!(server.draft_n, Some(drafted), "{s:?}");
        assert_eq!(server.draft_n_accepted, Some(accepted), "{s:?}");

        // ctxbench's counts are the server's, from its /metrics counters (not a copy of
        // the timings it is compared with).
        assert!(
            s.spec_source
                .as_deref()
                .is_some_and(|x| x.contains("metric")),
            "{s:?}"
        );
        assert_eq!(s.spec_draft_tokens, Some(drafted), "{s:?}");
        assert_eq!(s.spec_accepted_tokens, Some(accepted), "{s:?}");
        assert_eq!(s.spec_draft_steps, Some(task.steps.len() as u64), "{s:?}");
        let rate_c = s.spec_accept_rate.expect("accept rate");
        assert!((rate_c - rate).abs() < 1e-5, "{rate_c} vs the log's {rate}");
        let server_len = 1.0 + accepted as f64 / task.steps.len() as f64;
        assert!(
            (server_len - mean_len).abs() < 0.006,
            "{server_len} vs {mean_len}"
        );

        // Every decode step yields its accepted drafts plus one token; llama-server drafts
        // nothing when one token is left, so ctxbench's steps are the drafted ones plus at
        // most that last plain one.
        let n = s.output_tokens.unwrap();
        assert_eq!(n, OUTPUT);
        let steps = s.spec_verify_steps.expect("verify steps");
        assert_eq!(steps, n - 1 - accepted, "{s:?}");
        let plain = steps - task.steps.len() as u64;
        assert!(plain <= 1, "{plain} steps without a draft: {task:?}");
        let length = s.spec_accept_length.unwrap();
        assert!((length - (n - 1) as f64 / steps as f64).abs() < 1e-9);

        // A block per step: DFlash proposes the whole block (n_max), cut only by the tokens
        // still to generate, never by the draft's confidence.
        let mut left = n - 1;
        for &(k, drafted_here) in &task.steps {
            assert_eq!(drafted_here, N_MAX.min(left - 1), "{task:?}");
            left -= k + 1;
        }
        assert_eq!(left, plain);

        lengths.insert(s.context_tokens);
        println!(
            "{:>7}  {:>5}  {:>8}  {:>11}  {:>12}  {:>11.3}  {:>13.3} │ {:>13}  {:>8}  {:>12}  {:>8.2}",
            s.context_tokens,
            drafted,
            accepted,
            task.steps.len(),
            steps,
            rate_c,
            length,
            sum_gen,
            sum_acc,
            task.steps.len(),
            mean_len
        );
    }
    assert_eq!(
        lengths.len(),
        contexts.len(),
        "every length measured: {lengths:?}"
    );
}
