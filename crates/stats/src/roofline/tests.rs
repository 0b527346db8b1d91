//! The roofline against numbers worked out by hand.

use super::*;
use crate::stats::fit::{self, Model};
use crate::stats::Spread;

/// Llama-3.1-8B in BF16, as its config.json gives it (schema::model's test): 15.01 GB a
/// step reads, 128 KiB of cache per token, 13.96 GFLOPs per token outside attention.
fn llama_8b() -> ModelFacts {
    ModelFacts {
        source: "config.json".into(),
        params: Some(8_030_261_248),
        weight_bytes: Some(16_060_522_496),
        embedding_bytes: Some(1_050_673_152),
        kv_bytes_per_token: Some(131_072),
        flops_per_token: Some(13_958_643_712.0),
        attention_flops_per_token2: Some(262_144.0),
        ..ModelFacts::default()
    }
}

fn h100() -> Limits {
    Limits::resolve(Some("h100-sxm"), None, None)
        .unwrap()
        .unwrap()
}

fn spread(x: f64) -> Option<Spread> {
    Spread::of([x])
}

/// Points at 8k…128k whose steps run at `fraction` of the H100 bound and whose prefill
/// runs at `mfu` of its peak.
fn points(fraction: f64, mfu: f64) -> Vec<PointSummary> {
    let f = llama_8b();
    [8192u64, 32768, 131072]
        .iter()
        .map(|&l| PointSummary {
            context_tokens: l,
            ms_per_step: spread(decode_bound_ms(&f, 3350.0, l).unwrap() / fraction),
            ttft_ms: spread(prefill_flops(&f, l).unwrap() / (mfu * 989.4e12) * 1e3),
            ..PointSummary::default()
        })
        .collect()
}

fn run(points: &[PointSummary], limits: &Limits) -> Roofline {
    analyse(&Input {
        facts: Some(&llama_8b()),
        limits,
        points,
        step_fit: None,
    })
}

#[test]
fn an_8b_model_on_an_h100_reads_39_ns_per_context_token_and_a_128k_step_takes_10_ms() {
    let f = llama_8b();
    // 131,072 B per token ÷ 3.35 TB/s = 39.1 ns; 27.3 ns on an H200, 16.4 ns on a B200.
    let slope = |bw: f64| decode_bound_ms(&f, bw, 1).unwrap() - decode_bound_ms(&f, bw, 0).unwrap();
    assert!(
        (slope(3350.0) * 1e6 - 39.13).abs() < 0.01,
        "{}",
        slope(3350.0)
    );
    assert!((slope(4800.0) * 1e6 - 27.31).abs() < 0.01);
    assert!((slope(8000.0) * 1e6 - 16.38).abs() < 0.01);
    // The weights alone: 15.01 GB ÷ 3.35 TB/s = 4.48 ms; at 128k the cache adds 17.18 GB:
    // 32.19 GB ÷ 3.35 TB/s = 9.61 ms, the least a 128k step can take.
    assert!((decode_bound_ms(&f, 3350.0, 0).unwrap() - 4.480).abs() < 0.005);
    let at_128k = decode_bound_ms(&f, 3350.0, 131_072).unwrap();
    assert!((at_128k - 9.609).abs() < 0.005, "{at_128k}");
    // Prefill of 8k: 13.96 G × 8192 + 262,144 × 8192² = 1.320e14 FLOPs.
    let flops = prefill_flops(&f, 8192).unwrap();
    assert!((flops / 1.3196e14 - 1.0).abs() < 1e-3, "{flops:e}");
}

#[test]
fn a_run_at_23_percent_of_the_bound_has_4_3_times_left() {
    let r = run(&points(0.23, 0.4), &h100());
    assert_eq!(r.decode.len(), 3);
    for d in &r.decode {
        assert!(
            (d.utilisation - 0.23).abs() < 1e-9 && !d.impossible,
            "{d:?}"
        );
    }
    let h = r.decode_headroom.unwrap();
    assert_eq!(
        h.decode_line(),
        "decode at 128k is at 23% of the bandwidth bound: up to 4.3× left"
    );
    // Prefill at 40% of the H100's 989.4 TFLOPs.
    for p in &r.prefill {
        assert!((p.mfu - 0.4).abs() < 1e-9, "{p:?}");
    }
    assert_eq!(
        r.prefill_headroom.unwrap().prefill_line(),
        "prefill at 128k is at 40% of peak FLOPs (MFU): up to 2.5× left"
    );
    assert!(r.defects.is_empty(), "{:?}", r.defects);
}

#[test]
fn a_bandwidth_ten_times_too_low_is_a_defect_never_a_figure() {
    let low = Limits::resolve(None, Some(335.0), Some(98.94))
        .unwrap()
        .unwrap();
    let r = run(&points(0.23, 0.4), &low);
    // 2.3× and 4× the bound: impossible, so flagged and kept out of the headroom lines.
    assert!(r.decode.iter().all(|d| d.impossible && d.utilisation > 2.2));
    assert!(r.prefill.iter().all(|p| p.impossible));
    assert!(r.decode_headroom.is_none() && r.prefill_headroom.is_none());
    assert_eq!(r.defects.len(), 2, "{:?}", r.defects);
    assert!(
        r.defects[0].contains("above 100% of the bound: check --memory-bandwidth")
            && r.defects[0].contains("335 GB/s"),
        "{}",
        r.defects[0]
    );
    assert!(r.defects[1].contains("above 100% of peak FLOPs: check --peak-tflops"));
    // One impossible point is enough to withhold the line: the inputs are wrong.
    let mut p = points(0.5, 0.4);
    p[0].ms_per_step = spread(p[0].ms_per_step.unwrap().median / 4.0);
    let r = run(&p, &h100());
    assert!(r.decode[0].impossible && !r.decode[2].impossible);
    assert!(r.decode_headroom.is_none() && r.defects.len() == 1);
}

#[test]
fn the_step_fit_in_bytes_names_a_kernel_that_reads_four_times_the_cache() {
    // A step costing the weights' 4.48 ms plus 4 × the cache's 39.1 ns per token.
    let f = llama_8b();
    let obs: Vec<(u64, f64)> = [8192u64, 16384, 32768, 65536, 131072]
        .iter()
        .flat_map(|&l| {
            let y = 4.480 + l as f64 * 4.0 * 131_072.0 / 3.35e12 * 1e3;
            [(l, y * 0.99), (l, y), (l, y * 1.01)]
        })
        .collect();
    let fit = fit::fit(Model::Linear, &obs).unwrap();
    let bands = fit::coefficient_bands(Model::Linear, &obs, 200, 3).unwrap();
    let limits = h100();
    let r = analyse(&Input {
        facts: Some(&f),
        limits: &limits,
        points: &[],
        step_fit: Some((&fit, Some(&bands))),
    });
    let b = r.step_fit.unwrap();
    // α × 3.35 TB/s ≈ 15.0 GB, the weights; β × 3.35 TB/s ≈ 524 kB = 4 × 131 kB.
    assert!((b.weight_bytes / 15.01e9 - 1.0).abs() < 0.03, "{b:?}");
    assert!((b.kv_ratio().unwrap() - 4.0).abs() < 0.1, "{b:?}");
    assert!(b.reads_far_more());
    let [w, k] = &b.lines()[..] else {
        panic!("{:?}", b.lines())
    };
    assert!(w.contains("against 15.0 GB of weights"), "{w}");
    assert!(
        k.contains("(4.0×)") && k.contains("far more than the cache"),
        "{k}"
    );
    // Reading the cache once is not "far more".
    let once: Vec<(u64, f64)> = obs
        .iter()
        .map(|&(l, _)| (l, 4.480 + l as f64 * 131_072.0 / 3.35e12 * 1e3))
        .collect();
    let fit = fit::fit(Model::Linear, &once).unwrap();
    let r = analyse(&Input {
        facts: Some(&f),
        limits: &limits,
        points: &[],
        step_fit: Some((&fit, None)),
    });
    let b = r.step_fit.unwrap();
    assert!(!b.reads_far_more() && (b.kv_ratio().unwrap() - 1.0).abs() < 0.01);
}

#[test]
fn what_is_missing_is_said_and_the_bound_stays_a_lower_one() {
    let limits = h100();
    let r = analyse(&Input {
        facts: None,
        limits: &limits,
        points: &points(0.5, 0.5),
        step_fit: None,
    });
    assert!(r.decode.is_empty() && r.notes[0].contains("no model facts"));
    // The server's meta: weights but no cache; the bound is the weights' alone.
    let meta = ModelFacts::from_counts(
        "meta",
        Some(84_282_496),
        Some(337_129_984),
        Some((32_000, 128)),
    );
    let p = vec![PointSummary {
        context_tokens: 1024,
        ms_per_step: spread(1.0),
        ..PointSummary::default()
    }];
    let r = analyse(&Input {
        facts: Some(&meta),
        limits: &Limits::resolve(None, Some(641.5), None).unwrap().unwrap(),
        points: &p,
        step_fit: None,
    });
    // 320.7 MB ÷ 641.5 GB/s = 0.5 ms against 1 ms measured: 50%.
    assert!(
        (r.decode[0].utilisation - 0.5).abs() < 1e-3,
        "{:?}",
        r.decode
    );
    assert!(r.notes.iter().any(|n| n.contains("weights only")));
    assert!(r.notes.iter().any(|n| n.contains("no --peak-tflops")));
}

#[test]
fn speculative_decoding_is_held_against_the_bound_per_verify_step() {
    // Three tokens per verify step: per token, the step looks 3× faster than memory allows.
    let f = llama_8b();
    let bound = decode_bound_ms(&f, 3350.0, 8192).unwrap();
    let p = vec![PointSummary {
        context_tokens: 8192,
        ms_per_step: spread(bound / 0.6 / 3.0),
        ms_per_verify_step: spread(bound / 0.6),
        spec_accept_length: spread(3.0),
        ..PointSummary::default()
    }];
    let r = run(&p, &h100());
    assert!((r.decode[0].utilisation - 0.6).abs() < 1e-9 && r.defects.is_empty());
    assert!(r.notes.iter().any(|n| n.contains("verify step")));
}

#[test]
fn limits_come_from_the_table_or_the_flags_which_override_it() {
    assert_eq!(Limits::resolve(None, None, None).unwrap(), None);
    let l = Limits::resolve(Some("h100"), None, Some(1979.0))
        .unwrap()
        .unwrap();
    assert_eq!(
        (l.memory_bandwidth_gb_s, l.peak_tflops),
        (Some(3350.0), Some(1979.0))
    );
    assert!(l.source.contains("--hardware h100-sxm") && l.source.contains("--peak-tflops 1979"));
    assert!(Limits::resolve(Some("gb300"), None, None).is_err());
    assert_eq!(pct(0.234), "23%");
    assert_eq!(pct(0.0423), "4.2%");
    assert_eq!(bytes(15.01e9), "15.0 GB");
    assert_eq!(bytes(131_072.0), "131 kB");
}
