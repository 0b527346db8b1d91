//! How far from the hardware's limit: a run's roofline, per context length. No I/O.
//!
//! A decode step must read every weight it applies once and the KV cache of all L context
//! tokens, so no server can take less than
//! `(step weight bytes + L × KV bytes per token) / memory bandwidth` per step; the measured
//! median step as a fraction of that is the bandwidth utilisation. A prefill of L tokens must
//! do `FLOPs per token × L + attention FLOPs × L²`, so FLOPs ÷ (TTFT × peak) is its MFU. The
//! step fit ms/step ≈ α + βL says the same in bytes: α × bandwidth is what the fixed part of a
//! step could read, β × bandwidth what each context token costs, next to the KV bytes the
//! cache holds per token.
//!
//! Impossible is a defect, never a figure: a utilisation or MFU above 100% cannot be
//! measured, only mis-stated (a bandwidth or peak given too low, model facts too big, a
//! cache hit counted as a prefill), so it is flagged with what to check and kept out of the
//! headroom line.

pub mod hardware;
pub mod versus;

use serde::Serialize;

use crate::stats::fit::{CoefBand, Fit};
use crate::stats::PointSummary;
use ctxbench_schema::model::ModelFacts;
use ctxbench_schema::units::fmt_ctx;

pub use hardware::UnknownHardware;

/// β × bandwidth at least this many times the KV bytes per token: the attention kernel
/// reads far more than the cache (which a step needs to read once).
pub const FAR_MORE: f64 = 2.0;

/// The machine limits a report is held against.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Limits {
    /// Where they came from (`--hardware h100-sxm`, `--memory-bandwidth`, …).
    pub source: String,
    /// Memory bandwidth, GB/s (10⁹ bytes per second).
    pub memory_bandwidth_gb_s: Option<f64>,
    /// Peak FLOPs, TFLOPs (10¹² per second).
    pub peak_tflops: Option<f64>,
}

impl Limits {
    /// The limits of `--hardware`, `--memory-bandwidth` and `--peak-tflops` (the last two
    /// override the table's); `None` when none was given.
    pub fn resolve(
        hardware: Option<&str>,
        bandwidth_gb_s: Option<f64>,
        peak_tflops: Option<f64>,
    ) -> Result<Option<Limits>, UnknownHardware> {
        let acc = hardware.map(hardware::find).transpose()?;
        if acc.is_none() && bandwidth_gb_s.is_none() && peak_tflops.is_none() {
            return Ok(None);
        }
        let mut source = Vec::new();
        if let Some(a) = acc {
            source.push(format!(
                "--hardware {} ({}: {} GB/s, {} TFLOPs dense BF16)",
                a.name, a.label, a.memory_bandwidth_gb_s, a.bf16_dense_tflops
            ));
        }
        if let Some(b) = bandwidth_gb_s {
            source.push(format!("--memory-bandwidth {b} GB/s"));
        }
        if let Some(p) = peak_tflops {
            source.push(format!("--peak-tflops {p}"));
        }
        Ok(Some(Limits {
            source: source.join(", "),
            memory_bandwidth_gb_s: bandwidth_gb_s.or(acc.map(|a| a.memory_bandwidth_gb_s)),
            peak_tflops: peak_tflops.or(acc.map(|a| a.bf16_dense_tflops)),
        }))
    }

    /// Bytes per second.
    fn bandwidth(&self) -> Option<f64> {
        self.memory_bandwidth_gb_s.map(|b| b * 1e9)
    }
}

/// A run held against the limits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Roofline {
    /// The limits.
    pub limits: Limits,
    /// The model's size, as recorded and as `--model-config` adds.
    pub facts: Option<ModelFacts>,
    /// Per context length: the measured decode step against its bandwidth bound.
    pub decode: Vec<DecodePoint>,
    /// The run decodes speculatively: its measured steps are verify steps (one read of the
    /// weights for several tokens), not tokens.
    pub per_verify_step: bool,
    /// What the ms/step fit implies in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_fit: Option<ImpliedBytes>,
    /// Per context length: prefill's FLOPs over its TTFT against the peak.
    pub prefill: Vec<PrefillPoint>,
    /// Decode at the largest length, when every decode figure is possible.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_headroom: Option<Headroom>,
    /// Prefill at the largest length, when every MFU is possible.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_headroom: Option<Headroom>,
    /// Figures above 100% of a bound: impossible, so flagged, and no headroom drawn from them.
    pub defects: Vec<String>,
    /// What is missing, and how to read the figures.
    pub notes: Vec<String>,
}

/// One context length's decode step against the bandwidth bound.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DecodePoint {
    /// Context length (prompt tokens).
    pub context_tokens: u64,
    /// Median measured ms per step (per verify step under speculative decoding).
    pub measured_ms: f64,
    /// (step weight bytes + L × KV bytes per token) ÷ bandwidth, in ms.
    pub bound_ms: f64,
    /// bound ÷ measured: the share of the memory bandwidth the step used.
    pub utilisation: f64,
    /// Faster than the memory allows (utilisation above 1): a defect of the inputs.
    pub impossible: bool,
}

/// One context length's prefill against the peak FLOPs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PrefillPoint {
    /// Context length (prompt tokens).
    pub context_tokens: u64,
    /// Median TTFT, ms.
    pub ttft_ms: f64,
    /// FLOPs a prefill of this length must do.
    pub flops: f64,
    /// FLOPs ÷ (TTFT × peak).
    pub mfu: f64,
    /// Above the peak: a defect of the inputs.
    pub impossible: bool,
}

/// How far one figure is from its bound at one length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Headroom {
    /// Where.
    pub context_tokens: u64,
    /// The fraction of the bound reached (≤ 1).
    pub fraction: f64,
}

impl Headroom {
    /// How many times faster it could be at most (1 ÷ fraction).
    pub fn left(&self) -> f64 {
        1.0 / self.fraction
    }

    /// "decode at 128k is at 23% of the bandwidth bound: up to 4.3× left".
    pub fn decode_line(&self) -> String {
        format!(
            "decode at {} is at {} of the bandwidth bound: up to {:.1}× left",
            fmt_ctx(self.context_tokens),
            pct(self.fraction),
            self.left()
        )
    }

    /// "prefill at 128k is at 41% of peak FLOPs (MFU): up to 2.4× left".
    pub fn prefill_line(&self) -> String {
        format!(
            "prefill at {} is at {} of peak FLOPs (MFU): up to {:.1}× left",
            fmt_ctx(self.context_tokens),
            pct(self.fraction),
            self.left()
        )
    }
}

/// The ms/step fit α + βL in bytes, at the memory bandwidth.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImpliedBytes {
    /// α × bandwidth: bytes the fixed part of a step could read.
    pub weight_bytes: f64,
    /// Its 90% band, from the fit's bootstrap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight_band: Option<[f64; 2]>,
    /// Bytes a step must read for the weights (the model's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_weight_bytes: Option<u64>,
    /// β × bandwidth: bytes each context token costs a step.
    pub bytes_per_context_token: f64,
    /// Its 90% band.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_token_band: Option<[f64; 2]>,
    /// KV cache bytes per token (the model's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_bytes_per_token: Option<u64>,
}

impl ImpliedBytes {
    /// bytes per context token ÷ KV bytes per token.
    pub fn kv_ratio(&self) -> Option<f64> {
        self.kv_bytes_per_token
            .filter(|k| *k > 0)
            .map(|k| self.bytes_per_context_token / k as f64)
    }

    /// The whole band of β × bandwidth lies at or above [`FAR_MORE`] × the KV bytes: the
    /// attention kernel reads far more than the cache.
    pub fn reads_far_more(&self) -> bool {
        let low = self
            .per_token_band
            .map_or(self.bytes_per_context_token, |b| b[0]);
        self.kv_bytes_per_token
            .is_some_and(|k| k > 0 && low >= FAR_MORE * k as f64)
    }

    /// What the fit says, in words: the fixed part against the weights, the slope against
    /// the cache.
    pub fn lines(&self) -> Vec<String> {
        let band = |b: &Option<[f64; 2]>| {
            b.map_or(String::new(), |b| {
                format!(" (90%: {}–{})", bytes(b[0]), bytes(b[1]))
            })
        };
        let mut out = Vec::new();
        let mut w = format!(
            "α × bandwidth = {} per step{}",
            bytes(self.weight_bytes),
            band(&self.weight_band)
        );
        if let Some(m) = self.model_weight_bytes {
            w.push_str(&format!(
                ", against {} of weights a step reads",
                bytes(m as f64)
            ));
            let high = self.weight_band.map_or(self.weight_bytes, |b| b[1]);
            if high < m as f64 {
                w.push_str(": less than the weights, so the fit's fixed part is too short to read them once (check --memory-bandwidth, or the fit at these lengths)");
            }
        }
        out.push(w);
        let mut k = format!(
            "β × bandwidth = {} per context token{}",
            bytes(self.bytes_per_context_token),
            band(&self.per_token_band)
        );
        match (self.kv_bytes_per_token, self.kv_ratio()) {
            (Some(kv), Some(r)) => {
                k.push_str(&format!(
                    ", against {} of KV cache per token ({r:.1}×)",
                    bytes(kv as f64)
                ));
                if self.reads_far_more() {
                    k.push_str(": the attention kernel reads far more than the cache, which a step needs to read once; this is where long-context decode time goes");
                } else if self.per_token_band.map_or(r < 1.0, |b| b[1] < kv as f64) {
                    k.push_str(": less than the cache, so at these lengths the cache is too small a part of a step for the fit to see (or the cache is narrower than the facts say)");
                }
            }
            _ => k.push_str(" (KV bytes per token unknown: give --model-config)"),
        }
        out.push(k);
        out
    }
}

/// A fraction as a percentage: `23%`, `4.2%`.
pub fn pct(x: f64) -> String {
    if x * 100.0 >= 9.95 {
        format!("{:.0}%", x * 100.0)
    } else {
        format!("{:.1}%", x * 100.0)
    }
}

/// Bytes in decimal units: `15.0 GB`, `131 kB`, `512 B`.
pub fn bytes(b: f64) -> String {
    let (v, unit) = match b.abs() {
        x if x >= 1e9 => (b / 1e9, "GB"),
        x if x >= 1e6 => (b / 1e6, "MB"),
        x if x >= 1e3 => (b / 1e3, "kB"),
        _ => return format!("{b:.0} B"),
    };
    match v.abs() {
        x if x >= 100.0 => format!("{v:.0} {unit}"),
        x if x >= 10.0 => format!("{v:.1} {unit}"),
        _ => format!("{v:.2} {unit}"),
    }
}

/// FLOPs in decimal units: `14.0 GFLOPs`, `8.78 MFLOPs`.
pub fn flops(x: f64) -> String {
    let (v, unit) = match x.abs() {
        a if a >= 1e12 => (x / 1e12, "TFLOPs"),
        a if a >= 1e9 => (x / 1e9, "GFLOPs"),
        a if a >= 1e6 => (x / 1e6, "MFLOPs"),
        a if a >= 1e3 => (x / 1e3, "kFLOPs"),
        _ => return format!("{x:.0} FLOPs"),
    };
    match v.abs() {
        a if a >= 100.0 => format!("{v:.0} {unit}"),
        a if a >= 10.0 => format!("{v:.1} {unit}"),
        _ => format!("{v:.2} {unit}"),
    }
}

/// What [`analyse`] needs of one run.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// The model's size.
    pub facts: Option<&'a ModelFacts>,
    /// The limits.
    pub limits: &'a Limits,
    /// The run's per-length summaries.
    pub points: &'a [PointSummary],
    /// The ms/step fit and its coefficients' bands.
    pub step_fit: Option<(&'a Fit, Option<&'a [CoefBand]>)>,
}

/// The bound on one decode step at `l` tokens of context, ms; `None` when neither the
/// weights nor the cache are known.
pub fn decode_bound_ms(facts: &ModelFacts, bandwidth_gb_s: f64, l: u64) -> Option<f64> {
    let w = facts.step_weight_bytes();
    let kv = facts.kv_bytes_per_token;
    if w.is_none() && kv.is_none() {
        return None;
    }
    let bytes = w.unwrap_or(0) as f64 + l as f64 * kv.unwrap_or(0) as f64;
    (bytes > 0.0).then(|| bytes / (bandwidth_gb_s * 1e9) * 1e3)
}

/// FLOPs a prefill of `l` tokens must do; `None` when the model's FLOPs are unknown.
pub fn prefill_flops(facts: &ModelFacts, l: u64) -> Option<f64> {
    let l = l as f64;
    match (facts.flops_per_token, facts.attention_flops_per_token2) {
        (None, None) => None,
        (f, a) => Some(f.unwrap_or(0.0) * l + a.unwrap_or(0.0) * l * l),
    }
}

/// The roofline of one run.
pub fn analyse(input: &Input) -> Roofline {
    let mut r = Roofline {
        limits: input.limits.clone(),
        facts: input.facts.cloned(),
        decode: Vec::new(),
        per_verify_step: false,
        step_fit: None,
        prefill: Vec::new(),
        decode_headroom: None,
        prefill_headroom: None,
        defects: Vec::new(),
        notes: Vec::new(),
    };
    let Some(facts) = input.facts else {
        r.notes.push("no model facts: the server did not state them (llama.cpp's /v1/models meta does) and no --model-config was given, so there is no bound to hold the run against".into());
        return r;
    };
    r.notes.extend(facts.notes.iter().cloned());
    let speculative = input.points.iter().any(|p| p.spec_accept_length.is_some());
    r.per_verify_step = speculative;
    decode(&mut r, facts, input.points, speculative);
    if !speculative {
        r.step_fit = match (input.step_fit, input.limits.bandwidth()) {
            (Some((fit, bands)), Some(bw)) => implied(facts, fit, bands, bw),
            _ => None,
        };
        if input.step_fit.is_some_and(|(f, _)| f.is_poor()) && r.step_fit.is_some() {
            r.notes.push(
                "the ms/step fit is poor (see the fits): the bytes it implies are rough".into(),
            );
        }
    }
    prefill(&mut r, facts, input.points);
    r
}

/// The decode points, their defects and the headroom line.
fn decode(r: &mut Roofline, facts: &ModelFacts, points: &[PointSummary], speculative: bool) {
    let Some(bw) = r.limits.memory_bandwidth_gb_s else {
        r.notes.push(
            "no --memory-bandwidth or --hardware: no decode bound (utilisation) is given".into(),
        );
        return;
    };
    if facts.step_weight_bytes().is_none() && facts.kv_bytes_per_token.is_none() {
        r.notes.push(
            "the model facts give neither weight bytes nor KV bytes per token: no decode bound"
                .into(),
        );
        return;
    }
    if facts.kv_bytes_per_token.is_none() {
        r.notes.push("the decode bound counts the weights only: KV bytes per token are unknown (give --model-config); it is lower than the true bound, so utilisations are modest".into());
    }
    if facts.step_weight_bytes().is_none() {
        r.notes.push("the decode bound counts the KV cache only: weight bytes are unknown; it is lower than the true bound, so utilisations are modest".into());
    }
    if speculative {
        r.notes.push("speculative decoding: each verify step (one read of the weights for several tokens) is held against the bound, not each token; the fit is per token, so its bytes are not shown".into());
    }
    for p in points {
        let measured = match speculative {
            true => p.ms_per_verify_step,
            false => p.ms_per_step,
        };
        let (Some(m), Some(bound)) = (
            measured.map(|s| s.median).filter(|m| *m > 0.0),
            decode_bound_ms(facts, bw, p.context_tokens),
        ) else {
            continue;
        };
        let utilisation = bound / m;
        r.decode.push(DecodePoint {
            context_tokens: p.context_tokens,
            measured_ms: m,
            bound_ms: bound,
            utilisation,
            impossible: utilisation > 1.0,
        });
    }
    let bad: Vec<&DecodePoint> = r.decode.iter().filter(|d| d.impossible).collect();
    if bad.is_empty() {
        r.decode_headroom = r.decode.last().map(|d| Headroom {
            context_tokens: d.context_tokens,
            fraction: d.utilisation,
        });
    } else {
        r.defects.push(format!(
            "above 100% of the bound: check --memory-bandwidth ({bw} GB/s from {}) and the model facts ({}): decode measured faster than its memory can read the {} at {}; no headroom figure is given",
            r.limits.source,
            facts.source,
            match facts.kv_bytes_per_token {
                Some(_) => "weights and the cache",
                None => "weights",
            },
            bad.iter()
                .map(|d| format!("{} ({} ms measured, {} ms bound)", fmt_ctx(d.context_tokens), ms(d.measured_ms), ms(d.bound_ms)))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
}

/// The prefill MFU points, their defects and the headroom line.
fn prefill(r: &mut Roofline, facts: &ModelFacts, points: &[PointSummary]) {
    let Some(peak) = r.limits.peak_tflops else {
        r.notes
            .push("no --peak-tflops or --hardware: no prefill MFU is given".into());
        return;
    };
    if facts.flops_per_token.is_none() && facts.attention_flops_per_token2.is_none() {
        r.notes
            .push("the model facts give no FLOPs per token: no prefill MFU".into());
        return;
    }
    if facts.attention_flops_per_token2.is_none() {
        r.notes.push("prefill FLOPs count the matrices only: the attention's are unknown (give --model-config); the MFU is lower than the true one".into());
    }
    for p in points {
        let (Some(t), Some(flops)) = (
            p.ttft_ms.map(|s| s.median).filter(|t| *t > 0.0),
            prefill_flops(facts, p.context_tokens),
        ) else {
            continue;
        };
        let mfu = flops / (t / 1e3 * peak * 1e12);
        r.prefill.push(PrefillPoint {
            context_tokens: p.context_tokens,
            ttft_ms: t,
            flops,
            mfu,
            impossible: mfu > 1.0,
        });
    }
    let bad: Vec<&PrefillPoint> = r.prefill.iter().filter(|p| p.impossible).collect();
    if bad.is_empty() {
        r.prefill_headroom = r.prefill.last().map(|p| Headroom {
            context_tokens: p.context_tokens,
            fraction: p.mfu,
        });
    } else {
        r.defects.push(format!(
            "above 100% of peak FLOPs: check --peak-tflops ({peak} from {}) and the model facts ({}): prefill measured faster than the peak allows at {}; no MFU headroom is given",
            r.limits.source,
            facts.source,
            bad.iter()
                .map(|p| fmt_ctx(p.context_tokens))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
}

/// α and β of the step fit (ms and ms per token) in bytes at `bw` bytes per second.
fn implied(
    facts: &ModelFacts,
    fit: &Fit,
    bands: Option<&[CoefBand]>,
    bw: f64,
) -> Option<ImpliedBytes> {
    let [alpha, beta] = fit.coef[..] else {
        return None;
    };
    let to_bytes = |ms: f64| ms / 1e3 * bw;
    let band = |j: usize| {
        bands
            .and_then(|b| b.get(j))
            .map(|b| [to_bytes(b.low), to_bytes(b.high)])
    };
    Some(ImpliedBytes {
        weight_bytes: to_bytes(alpha),
        weight_band: band(0),
        model_weight_bytes: facts.step_weight_bytes(),
        bytes_per_context_token: to_bytes(beta),
        per_token_band: band(1),
        kv_bytes_per_token: facts.kv_bytes_per_token,
    })
}

/// Milliseconds with about three significant digits.
pub fn ms(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else if x >= 0.1 {
        format!("{x:.2}")
    } else {
        format!("{x:.4}")
    }
}

#[cfg(test)]
mod tests;
