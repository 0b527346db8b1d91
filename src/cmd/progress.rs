//! The terminal progress display: one [`Observer`] of the measuring loop (a bar on a
//! terminal, one line per sample otherwise).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

use ctxbench_schema::record::{Sample, Status};
use ctxbench_schema::units::fmt_ctx;
use ctxbench_session::bench::{Observer, PointRecord};

/// A progress bar on a terminal, one line per sample otherwise (CI logs).
pub struct Terminal {
    bar: Option<ProgressBar>,
    quiet: bool,
    eta: Option<f64>,
    /// The sample that waits for an idle server (its message is restored after the wait).
    waiting: Option<(u64, u32)>,
    /// Why a point has no interval (too few values) was said once; later points say "n/a".
    ci_explained: bool,
}

impl Terminal {
    /// A bar when stderr is a terminal; `quiet` keeps only warnings.
    pub fn new(quiet: bool) -> Self {
        Terminal {
            bar: None,
            quiet,
            eta: None,
            waiting: None,
            ci_explained: false,
        }
    }

    fn line(&self, msg: &str) {
        match &self.bar {
            Some(b) => b.println(msg),
            None => eprintln!("{msg}"),
        }
    }
}

fn describe(s: &Sample) -> String {
    // A grid's sample names its cell and wave: `8k × c=8 wave 1`.
    let ctx = match (s.concurrency, s.wave) {
        (Some(c), Some(w)) => format!("{:>6} × c={c} wave {w}", fmt_ctx(s.context_tokens)),
        _ => format!("{:>6} rep {}", fmt_ctx(s.context_tokens), s.rep),
    };
    match s.status {
        Status::Failed => format!(
            "  {ctx}: FAILED: {}",
            s.error.as_ref().map_or("?", |e| e.message.as_str())
        ),
        Status::Ok => {
            let f = |x: Option<f64>| x.map_or("–".to_owned(), |v| format!("{v:.1}"));
            let mut line = format!(
                "  {ctx}: TTFT {} ms (server {} ms), decode {} tok/s, cached {}",
                f(s.ttft_ms),
                f(s.server.as_ref().and_then(|t| t.prompt_ms)),
                f(s.decode_tokens_per_s),
                s.cached_tokens
                    .map_or("not reported".to_owned(), |c| c.to_string()),
            );
            if s.phase != ctxbench_schema::record::Phase::Cold {
                line = format!("{line} ({})", s.phase);
            }
            if let Some(a) = s.spec_accept_length {
                line.push_str(&format!(", accept length {a:.2}"));
            }
            if !s.flags.is_empty() {
                line.push_str(&format!(
                    "  [{}]",
                    s.flags
                        .iter()
                        .map(|f| f.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            line
        }
    }
}

impl Observer for Terminal {
    fn start(&mut self, total: usize, skipped: usize) {
        if skipped > 0 && !self.quiet {
            eprintln!("resuming: {skipped} sample(s) already recorded are skipped");
        }
        if std::io::stderr().is_terminal() && !self.quiet {
            let bar = ProgressBar::new(total as u64);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} samples  {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.enable_steady_tick(std::time::Duration::from_millis(200));
            self.bar = Some(bar);
        }
    }

    fn eta(&mut self, remaining_s: Option<f64>) {
        self.eta = remaining_s;
    }

    fn sample_started(&mut self, context: u64, rep: u32) {
        if let Some(b) = &self.bar {
            let eta = self
                .eta
                .map(|s| format!("  ETA {} (cost model)", fmt_secs(s)))
                .unwrap_or_default();
            b.set_message(format!("context {} rep {}{eta}", fmt_ctx(context), rep));
        }
    }

    fn waiting_for_idle(&mut self, context: u64, rep: u32, active: u64) {
        self.waiting = Some((context, rep));
        let msg = waiting_line(context, rep, active);
        match &self.bar {
            Some(b) => {
                let eta = self
                    .eta
                    .map(|s| format!("  ETA {} after the wait (cost model)", fmt_secs(s)))
                    .unwrap_or_default();
                b.set_message(format!("{}{eta}", msg.trim_start()));
            }
            None if !self.quiet => eprintln!("{msg}"),
            None => {}
        }
    }

    fn idle_reached(&mut self, waited_s: f64, expired: bool) {
        let msg = match expired {
            true => format!(
                "    the server stayed busy for {}: measuring anyway (flagged foreign_load)",
                fmt_secs(waited_s)
            ),
            false => format!(
                "    the server is idle after {}: measuring",
                fmt_secs(waited_s)
            ),
        };
        if expired || !self.quiet {
            self.line(&msg);
        }
        // Measuring again: the bar says which sample, not the wait.
        if let Some((context, rep)) = self.waiting.take() {
            self.sample_started(context, rep);
        }
    }

    fn point_done(&mut self, p: &PointRecord) {
        if self.quiet {
            return;
        }
        let line = point_line(p, &mut self.ci_explained);
        self.line(&line);
    }

    fn sample_done(&mut self, sample: &Sample) {
        if !self.quiet || sample.status == Status::Failed || sample.contaminated {
            self.line(&describe(sample));
        }
        if let Some(b) = &self.bar {
            b.inc(1);
        }
    }

    fn warn(&mut self, msg: &str) {
        self.line(&format!("warning: {msg}"));
    }

    fn note(&mut self, msg: &str, always: bool) {
        if always || !self.quiet {
            self.line(&format!("note: {msg}"));
        }
    }

    fn info(&mut self, msg: &str) {
        if !self.quiet {
            self.line(msg);
        }
    }

    fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// The line at the end of a point (or of a grid cell, named `1k × c=4`): repetitions, why
/// they stopped, and the precision reached. A CI that cannot exist yet says why, once per
/// run (`explained` remembers): in a grid cell the decode rate is one aggregate per wave, so
/// 2 waves give 2 values, not 2 × c.
pub fn point_line(p: &PointRecord, explained: &mut bool) -> String {
    let need = ctxbench_session::adaptive::min_values_for_ci();
    let mut ci = |x: Option<f64>, n: usize, what: &str| match x {
        Some(v) => format!("±{:.1}%", v * 100.0),
        None if n < need && !*explained => {
            *explained = true;
            format!("n/a ({n} {what}; a 95% CI needs {need}: --reps {need} or --precision)")
        }
        None => "n/a".to_owned(),
    };
    let waves = p.reps as usize;
    match p.concurrency {
        Some(c) => format!(
            "  {:>6} × c={c} done: {} wave(s), {} usable request(s) ({}); median 95% CI TTFT {}, aggregate decode {}",
            fmt_ctx(p.context_tokens),
            p.reps,
            p.usable,
            p.stop_reason,
            ci(p.ttft_ci_rel, p.usable, "TTFTs"),
            ci(p.decode_ci_rel, waves, "waves, one aggregate each"),
        ),
        None => match &p.design {
            // The end of a designed run correcting a line printed during it.
            Some(d) if d.revised.is_some() => {
                format!("  {:>6} corrected: {}", fmt_ctx(p.context_tokens), d.why)
            }
            // A designed length says what the design decided, and why it measured more.
            Some(d) => format!(
                "  {:>6} done: {} rep(s), {} usable ({}); design: {}{}",
                fmt_ctx(p.context_tokens),
                p.reps,
                p.usable,
                p.stop_reason,
                d.why,
                d.regime_change
                    .as_ref()
                    .map_or(String::new(), |r| format!("; measured more here: {r}")),
            ),
            // A percentile target states that percentile's intervals, the ones it stopped on.
            None if p.quantile.is_some() => format!(
                "  {:>6} done: {} rep(s), {} usable ({}); {}",
                fmt_ctx(p.context_tokens),
                p.reps,
                p.usable,
                p.stop_reason,
                ctxbench_render::describe::quantile_text(p).unwrap_or_default(),
            ),
            None => format!(
                "  {:>6} done: {} rep(s), {} usable ({}); median 95% CI TTFT {}, decode {}",
                fmt_ctx(p.context_tokens),
                p.reps,
                p.usable,
                p.stop_reason,
                ci(p.ttft_ci_rel, p.usable, "usable"),
                ci(p.decode_ci_rel, p.usable, "usable"),
            ),
        },
    }
}

/// What the progress says while ctxbench waits for another client's work to end rather
/// than measuring.
pub fn waiting_line(context: u64, rep: u32, active: u64) -> String {
    format!(
        "  {:>6} rep {rep}: waiting for the server to be idle ({active} other request(s) running or waiting)",
        fmt_ctx(context)
    )
}

/// Seconds as `1h02m`, `3m05s` or `12.3s`.
pub fn fmt_secs(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return "?".to_owned();
    }
    let t = s.round() as u64;
    if t >= 3600 {
        format!("{}h{:02}m", t / 3600, t % 3600 / 60)
    } else if t >= 60 {
        format!("{}m{:02}s", t / 60, t % 60)
    } else {
        format!("{s:.1}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxbench_schema::record::StopReason;

    fn point(concurrency: Option<u32>, decode: Option<f64>) -> PointRecord {
        PointRecord {
            run_id: "r".into(),
            context_tokens: 1024,
            reps: 2,
            usable: 8,
            stop_reason: StopReason::FixedReps,
            ttft_ci_rel: Some(0.123),
            decode_ci_rel: decode,
            concurrency,
            design: None,
            quantile: None,
        }
    }

    #[test]
    fn waiting_for_an_idle_server_is_said_instead_of_measuring() {
        let l = waiting_line(8192, 2, 1);
        assert_eq!(
            l.trim_start(),
            "8k rep 2: waiting for the server to be idle (1 other request(s) running or waiting)"
        );
    }

    #[test]
    fn a_grid_cell_is_named_and_says_why_its_decode_ci_is_missing() {
        let l = point_line(&point(Some(4), None), &mut false);
        assert!(
            l.contains("1k × c=4 done: 2 wave(s), 8 usable request(s)"),
            "{l}"
        );
        assert!(l.contains("TTFT ±12.3%"), "{l}");
        assert!(
            l.contains("aggregate decode n/a (2 waves, one aggregate each; a 95% CI needs 6"),
            "{l}"
        );
        let l = point_line(&point(Some(4), Some(0.05)), &mut false);
        assert!(l.ends_with("aggregate decode ±5.0%"), "{l}");
    }

    #[test]
    fn a_grid_sample_names_its_cell_and_wave() {
        let mut s = Sample {
            context_tokens: 8192,
            rep: 1,
            ttft_ms: Some(12.0),
            ..Sample::default()
        };
        assert!(
            describe(&s).starts_with("      8k rep 1: TTFT 12.0 ms"),
            "{}",
            describe(&s)
        );
        s.concurrency = Some(8);
        s.wave = Some(1);
        assert!(
            describe(&s).starts_with("      8k × c=8 wave 1: TTFT 12.0 ms"),
            "{}",
            describe(&s)
        );
    }

    #[test]
    fn a_point_of_a_one_at_a_time_run_reads_as_before() {
        let l = point_line(&point(None, Some(0.02)), &mut false);
        assert_eq!(
            l,
            "      1k done: 2 rep(s), 8 usable (fixed repetitions done); median 95% CI TTFT ±12.3%, decode ±2.0%"
        );
        let mut p = point(None, None);
        p.usable = 2;
        p.ttft_ci_rel = None;
        let mut explained = false;
        let l = point_line(&p, &mut explained);
        assert!(
            l.ends_with(
                "TTFT n/a (2 usable; a 95% CI needs 6: --reps 6 or --precision), decode n/a"
            ),
            "{l}"
        );
        // Said once per run: the next point only says n/a.
        let l = point_line(&p, &mut explained);
        assert!(l.ends_with("TTFT n/a, decode n/a"), "{l}");
    }

    #[test]
    fn a_percentile_targeted_point_states_that_percentiles_intervals() {
        let mut p = point(None, Some(0.02));
        p.reps = 12;
        p.usable = 12;
        p.quantile = Some(ctxbench_schema::record::QuantileCi {
            q: 0.9,
            needed: 29,
            ttft_half_width: None,
            step_half_width: None,
        });
        let l = point_line(&p, &mut false);
        assert!(
            l.ends_with(
                "p90 95% interval (order statistics) TTFT n/a (p90 needs n ≥ 29; 12 usable), step time n/a (p90 needs n ≥ 29; 12 usable)"
            ),
            "{l}"
        );
        p.usable = 40;
        p.stop_reason = StopReason::PrecisionReached;
        p.quantile = p.quantile.map(|q| ctxbench_schema::record::QuantileCi {
            ttft_half_width: Some(0.041),
            step_half_width: Some(0.02),
            ..q
        });
        let l = point_line(&p, &mut false);
        assert!(
            l.ends_with(
                "(precision reached); p90 95% interval (order statistics) TTFT ±4.1%, step time ±2.0%"
            ),
            "{l}"
        );
        assert!(!l.contains("median"), "{l}");
    }
}
