//! Speculative statistics and slot-erase flush against the real reference llama-server.

use crate::common;

use common::{ref_paths, serial, sweep, RefServer};
use ctxbench_schema::record::Status;

#[test]
fn speculative_decoding_with_a_draft_model_reports_acceptance_per_sample() {
    let _g = serial();
    let model = ref_paths().model.to_str().unwrap().to_owned();
    // The tiny model as its own draft.
    let srv = RefServer::start(
        8192,
        &[
            "-md",
            &model,
            "--spec-type",
            "draft-simple",
            "--spec-draft-n-max",
            "8",
        ],
    );
    let run = sweep(
        &srv.url(),
        &[
            "--contexts",
            "1k,2k",
            "--reps",
            "2",
            "--output-tokens",
            "32",
        ],
    )
    .ok();
    let r = run.results();
    assert_eq!(r.samples.len(), 4);
    for s in &r.samples {
        assert_eq!(s.status, Status::Ok, "{s:?}");
        let server = s.server.as_ref().unwrap();
        let drafted = server.draft_n.expect("draft_n reported with a draft model");
        assert!(drafted > 0);
        // Per-request timings and the /metrics counters are two server sources: they agree.
        // The sample's counts must come from /metrics, or the comparison is a value with itself.
        assert!(
            s.spec_source
                .as_deref()
                .is_some_and(|x| x.contains("metric")),
            "{s:?}"
        );
        assert_eq!(s.spec_draft_tokens, Some(drafted), "{s:?}");
        assert_eq!(s.spec_accepted_tokens, server.draft_n_accepted, "{s:?}");
        let steps = s.spec_verify_steps.expect("verify steps");
        assert!(steps > 0 && steps <= 31, "{steps}");
        let rate = s.spec_accept_rate.unwrap();
        assert!(rate > 0.0 && rate <= 1.0, "{rate}");
        let len = s.spec_accept_length.unwrap();
        assert!((1.0..=9.0).contains(&len), "{len}");
        let m = s.metrics.as_ref().expect("metric deltas");
        assert_eq!(
            m.get("llamacpp:prompt_tokens_total").copied(),
            Some(s.context_tokens as f64)
        );
    }
    assert!(run.stdout.contains("accept length"), "{}", run.stdout);
}

#[test]
fn slot_erase_flush_runs_before_every_sample_with_slot_save_path() {
    let _g = serial();
    let slots = tempfile::tempdir().unwrap();
    let srv = RefServer::start(8192, &["--slot-save-path", slots.path().to_str().unwrap()]);
    let r = sweep(
        &srv.url(),
        &[
            "--contexts",
            "1k",
            "--reps",
            "2",
            "--output-tokens",
            "8",
            "--flush",
            "always",
        ],
    )
    .ok()
    .results();
    // The user's choice is the run's identity; what the first erase freed is not.
    assert_eq!(
        r.header.config.flush,
        Some(ctxbench_schema::record::FlushChoice::Always)
    );
    assert_eq!(
        r.header
            .server
            .flush_check
            .as_deref()
            .map(|f| f.contains("slot erase")),
        Some(true)
    );
    assert_eq!(r.header.server.flush_available, Some(true));
    for s in &r.samples {
        let f = s.flush.as_deref().expect("flushed");
        assert!(f.starts_with("llama.cpp slot erase"), "{f}");
        // The previous request's prompt was in the slot and was erased.
        assert!(!f.contains(" 0 tokens erased"), "{f}");
        assert_eq!(s.cached_tokens, Some(0));
    }
}

#[test]
fn slot_erase_without_slot_save_path_names_the_flag() {
    let _g = serial();
    let srv = RefServer::start(8192, &[]);
    let run = sweep(
        &srv.url(),
        &["--contexts", "1k", "--reps", "1", "--output-tokens", "16"],
    );
    let stderr = &run.stderr;
    assert_eq!(run.code, 0, "auto falls back: {stderr}");
    assert!(stderr.contains("--slot-save-path"), "{stderr}");
    let r = run.results();
    assert_eq!(r.samples[0].flush, None);
    assert_eq!(
        r.samples[0].cached_tokens,
        Some(0),
        "nonce and cache_prompt:false still hold"
    );
    let refused = sweep(
        &srv.url(),
        &["--contexts", "1k", "--reps", "1", "--flush", "always"],
    );
    let stderr = &refused.stderr;
    assert_eq!(refused.code, 2, "the user's choice cannot be met: {stderr}");
    assert!(!refused.out.exists(), "a results file was left behind");
    assert!(
        stderr.contains("--flush always") && stderr.contains("--slot-save-path"),
        "{stderr}"
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The two-point decode time t_B − t_A, checked against the server's own busy time for the
/// same two requests (prompt + generation of B minus that of A): both see the same load, so
/// a loaded host moves them together (measured on a loaded 2-core host: the client's
/// difference within 0.4% of the server's).
#[test]
fn two_point_time_difference_matches_the_servers_own_for_the_same_requests() {
    let _g = serial();
    let srv = RefServer::start(16384, &[]);
    // Long prompts and a short B: A's time (mostly prefill) is large next to the decode time,
    // so a rate timed over t_B alone is far from the true one.
    let tp = sweep(
        &srv.url(),
        &[
            "--contexts",
            "4k,8k",
            "--reps",
            "5",
            "--method",
            "two-point",
            "--two-point-tokens",
            "1,65",
        ],
    )
    .ok()
    .results();
    assert_eq!(tp.header.config.method, "two-point");
    for c in [4096, 8192] {
        // Per timed sample: the client's t_B − t_A minus the server's busy_B − busy_A (what
        // only the client saw: its overheads, which cancel), A's server time, and the server's
        // difference.
        let (mut excess, mut a_busy_all, mut server_dt_all) = (Vec::new(), Vec::new(), Vec::new());
        for s in tp.samples.iter().filter(|s| s.context_tokens == c) {
            assert_eq!(s.method, "two-point");
            assert_eq!(s.cached_tokens, Some(0), "each request has its own nonce");
            assert_eq!(s.output_tokens, Some(65));
            let t = s.two_point.as_ref().unwrap();
            let a_busy = t.a_server_busy_ms.expect("A's server time");
            let b_busy = s.server.as_ref().expect("B's server timings").busy_ms();
            // Prefill noise between A and B can exceed the decode time; then the sample says
            // so, never silently.
            match s.decode_tokens_per_s {
                // The rate is the extra tokens over the extra time of B.
                Some(d) => {
                    let want = (t.b_tokens - t.a_tokens) as f64 / (t.t_b_ms - t.t_a_ms) * 1000.0;
                    assert!((d - want).abs() <= 1e-6 * want, "{d} vs {want}: {t:?}");
                    excess.push((t.t_b_ms - t.t_a_ms) - (b_busy - a_busy));
                    a_busy_all.push(a_busy);
                    server_dt_all.push(b_busy - a_busy);
                }
                None => {
                    assert!(s.flags.iter().any(|f| f == "two_point_inverted"), "{s:?}");
                    assert!(t.reason.is_some());
                }
            }
        }
        assert!(excess.len() >= 3, "{c}: too few timed samples: {excess:?}");
        // Halfway to what a timing defect would give: t_A taken as 0 (the rate over t_B
        // alone, prefill counted as decode) makes the excess A's whole time; a ms/s slip
        // (Δt ≈ 0) makes it minus the server's difference.
        let (a_busy, server_dt) = (median(a_busy_all), median(server_dt_all));
        let bound = a_busy.min(server_dt) / 2.0;
        let e = median(excess.clone());
        assert!(
            e.abs() < bound,
            "{c}: client t_B − t_A exceeds the server's by {e:.2} ms (bound {bound:.1} ms: A {a_busy:.1} ms, server Δ {server_dt:.1} ms): {excess:?}"
        );
    }
}

#[test]
fn two_point_on_a_caching_server_yields_no_nan_and_no_unflagged_sample() {
    let _g = serial();
    let srv = RefServer::start(8192, &[]);
    // The seed's setup: no nonce, the server's cache left on, A then B on the same prompt.
    let run = sweep(
        &srv.url(),
        &[
            "--contexts",
            "2k",
            "--reps",
            "3",
            "--method",
            "two-point",
            "--nonce",
            "off",
            "--cache-bypass",
            "off",
        ],
    );
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    let r = run.results();
    assert_eq!(r.samples.len(), 3, "{stderr}");
    let raw = std::fs::read_to_string(&run.out).unwrap();
    assert!(!raw.contains("NaN") && !raw.contains("Infinity"), "{raw}");
    for s in &r.samples {
        assert_eq!(s.status, Status::Ok);
        // B reuses A's prompt: the cache hit is seen and the sample flagged.
        assert!(
            s.contaminated && s.flags.iter().any(|f| f == "contaminated"),
            "{s:?}"
        );
        assert!(!s.usable());
        let t = s.two_point.as_ref().unwrap();
        match s.decode_tokens_per_s {
            Some(d) => assert!(d.is_finite() && d > 0.0),
            None => {
                assert!(s.flags.iter().any(|f| f == "two_point_inverted"), "{s:?}");
                assert!(
                    t.reason.as_deref().unwrap().contains("prefix cache"),
                    "{t:?}"
                );
            }
        }
    }
    assert!(stderr.contains("hit the prefix cache"), "{stderr}");
    // An inversion is flagged on the point too, not only in the file.
    let inverted = r
        .samples
        .iter()
        .filter(|s| s.decode_tokens_per_s.is_none())
        .count();
    // Whichever happened, the table and the warnings say exactly that.
    assert_eq!(
        stdout.contains(&format!("{inverted} t_B≤t_A")),
        inverted > 0,
        "{inverted} inverted: {stdout}"
    );
    assert_eq!(stderr.contains("t_B ≤ t_A"), inverted > 0, "{stderr}");
}

#[test]
fn decode_at_depth_samples_are_warm_and_cold_ones_stay_cold() {
    let _g = serial();
    let srv = RefServer::start(8192, &[]);
    let run = sweep(
        &srv.url(),
        &[
            "--contexts",
            "1k,4k",
            "--reps",
            "2",
            "--decode-samples",
            "2",
        ],
    )
    .ok();
    let r = run.results();
    assert_eq!(r.samples.len(), 2 * 2 * 3);
    let (cold, warm): (Vec<_>, Vec<_>) = r.samples.iter().partition(|s| s.phase == "cold");
    assert_eq!((cold.len(), warm.len()), (4, 8));
    for s in &cold {
        assert_eq!(s.cached_tokens, Some(0), "cold stays cold: {s:?}");
        assert!(s.usable());
    }
    for s in &warm {
        // The whole prefix but the last token comes from the cache, on purpose.
        assert_eq!(s.cached_tokens, Some(s.context_tokens - 1), "{s:?}");
        assert!(
            !s.contaminated && !s.usable(),
            "warm samples are kept apart"
        );
        assert!(s.decode_tokens_per_s.unwrap() > 0.0);
        assert_eq!(s.prefill_tokens_per_s, None);
    }
    let points = ctxbench_stats::stats::summarize(&r.samples);
    assert_eq!(points[0].usable, 2);
    assert_eq!(points[0].warm, 4);
    assert!(run.stdout.contains("decode at depth"), "{}", run.stdout);
}

/// The terminal's lines about the server before measuring (`note:`, `warning:`, the
/// capability lines) are what the header records: every note printed is in
/// `server.notes`, no line names a flush that then fails, and `server.flush_available`
/// says whether the flush works (readme-audit L13).
#[test]
fn the_header_records_every_note_printed_and_whether_the_flush_works() {
    let _g = serial();
    // No --slot-save-path: llama.cpp's slot erase is refused.
    let srv = RefServer::start(8192, &[]);
    let base = ["--contexts", "1k", "--reps", "1", "--output-tokens", "16"];
    let cases: [(&[&str], Option<bool>); 3] = [
        (&[], Some(false)),
        (&["--backend", "openai"], Some(false)),
        (&["--flush", "never"], None),
    ];
    for (extra, available) in cases {
        let run = sweep(&srv.url(), &[&base[..], extra].concat()).ok();
        let h = run.results().header;
        let stderr = &run.stderr;
        assert_eq!(h.server.flush_available, available, "{extra:?}: {stderr}");
        // Every note or warning printed before the plan is recorded, word for word.
        let before_plan = &stderr[..stderr.find("\nplan: ").expect("plan line")];
        let printed: Vec<&str> = before_plan
            .lines()
            .filter_map(|l| l.strip_prefix("note: ").or(l.strip_prefix("warning: ")))
            .collect();
        for n in &printed {
            assert!(
                h.server.notes.iter().any(|r| r == n),
                "{extra:?}: printed but not recorded: {n}\nrecorded: {:?}",
                h.server.notes
            );
        }
        // No capability line offers a flush that is then refused.
        let flush_lines: Vec<&str> = before_plan
            .lines()
            .filter(|l| l.contains("flush"))
            .collect();
        match available {
            Some(false) => {
                assert_eq!(h.server.flush, None, "{extra:?}");
                assert!(
                    flush_lines
                        .iter()
                        .all(|l| l.starts_with("note: no cache flush")),
                    "{extra:?}: {flush_lines:?}"
                );
                assert_eq!(flush_lines.len(), 1, "{extra:?}: {flush_lines:?}");
            }
            _ => assert!(
                flush_lines.len() == 1
                    && flush_lines[0].starts_with("flush: never (--flush never)"),
                "{extra:?}: {flush_lines:?}"
            ),
        }
        match extra.first() {
            // llama.cpp's own protocol: the note names the flag that enables the erase.
            None => assert!(
                printed.iter().any(|n| n.contains("--slot-save-path")),
                "{printed:?}"
            ),
            Some(&"--backend") => {
                assert_eq!(h.config.backend, "openai");
                assert!(
                    printed
                        .iter()
                        .any(|n| n.contains("openai protocol has no cache-flush endpoint")),
                    "{printed:?}"
                );
                assert!(!stderr.contains("slot-save-path"), "{stderr}");
            }
            _ => {}
        }
    }
}
