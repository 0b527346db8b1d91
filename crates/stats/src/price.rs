//! The price of a token: what a server rented by the hour costs per million input and output
//! tokens at each context length, from the run's own medians. Pure, no I/O.
//!
//! Input is cold prefill: one request at a time, the hour's price spread over the median TTFT
//! of a prompt of exactly `context_tokens` tokens. Output is decode at the median rate. Both
//! are for one request at a time; a server that batches many requests earns more per hour.

use serde::Serialize;

use crate::stats::PointSummary;

/// How the figures are computed, said beside every cost table.
pub const METHOD: &str = "input = price/3600 × median TTFT (s) ÷ prompt tokens × 1e6 (cold prefill); output = price/3600 ÷ median decode tok/s × 1e6; one request at a time, so a server batching many requests costs less per token";

/// Cost per million tokens at one context length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TokenCost {
    /// Context length (prompt tokens).
    pub context_tokens: u64,
    /// USD per million input tokens (cold prefill), when the point has a TTFT.
    pub usd_per_m_input: Option<f64>,
    /// USD per million output tokens, when the point has a decode rate.
    pub usd_per_m_output: Option<f64>,
}

/// Costs at every context length, for a price per hour.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostTable {
    /// The price of the server, USD per hour (`--price-per-hour`).
    pub price_per_hour: f64,
    /// One entry per context length, small first.
    pub points: Vec<TokenCost>,
    /// A capacity grid's cells: output cost at each cell's aggregate decode rate (all c
    /// requests decoding together), the figure that says what batching saves.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cells: Vec<CellCost>,
}

/// Cost per million output tokens of one capacity-grid cell.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CellCost {
    /// Context length of each request.
    pub context_tokens: u64,
    /// Requests in each wave.
    pub concurrency: u32,
    /// USD per million output tokens at the cell's aggregate decode rate (its whole-wave
    /// output rate where requests queued); `None` without a rate.
    pub usd_per_m_output: Option<f64>,
}

/// Output costs of a capacity map's cells.
pub fn cell_costs(map: &crate::capacity::CapacityMap, price_per_hour: f64) -> Vec<CellCost> {
    map.cells
        .iter()
        .map(|c| CellCost {
            context_tokens: c.context_tokens,
            concurrency: c.concurrency,
            usd_per_m_output: c
                .aggregate_decode_tokens_per_s
                .or(c.wave_output_tokens_per_s)
                .and_then(|r| output_cost(price_per_hour, r)),
        })
        .collect()
}

/// USD per million input tokens: `price_per_hour`'s share of the TTFT, per prompt token.
pub fn input_cost(price_per_hour: f64, ttft_ms: f64, prompt_tokens: u64) -> Option<f64> {
    (prompt_tokens > 0 && ttft_ms > 0.0)
        .then(|| price_per_hour / 3600.0 * (ttft_ms / 1000.0) / prompt_tokens as f64 * 1e6)
}

/// USD per million output tokens at `decode_tok_s`.
pub fn output_cost(price_per_hour: f64, decode_tok_s: f64) -> Option<f64> {
    (decode_tok_s > 0.0).then(|| price_per_hour / 3600.0 / decode_tok_s * 1e6)
}

/// The cost table of a run's points.
pub fn costs(points: &[PointSummary], price_per_hour: f64) -> CostTable {
    CostTable {
        price_per_hour,
        points: points
            .iter()
            .map(|p| TokenCost {
                context_tokens: p.context_tokens,
                usd_per_m_input: p
                    .ttft_ms
                    .and_then(|s| input_cost(price_per_hour, s.median, p.context_tokens)),
                usd_per_m_output: p
                    .decode_tokens_per_s
                    .and_then(|s| output_cost(price_per_hour, s.median)),
            })
            .collect(),
        cells: Vec::new(),
    }
}

/// A dollar amount with 3 significant digits below $100 (`0.0123`, `4.56`), whole dollars above.
pub fn usd(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x > 0.0 {
        let decimals = (2 - x.log10().floor() as i32).max(0) as usize;
        format!("{x:.decimals$}")
    } else {
        "0".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_costs_the_hours_price_spread_over_its_share_of_the_time() {
        // $3.60/hour is $0.001/s: a 1 s TTFT over 1000 tokens is $1 per million input
        // tokens; 100 tok/s decode is $10 per million output tokens.
        assert!((input_cost(3.6, 1000.0, 1000).unwrap() - 1.0).abs() < 1e-9);
        assert!((output_cost(3.6, 100.0).unwrap() - 10.0).abs() < 1e-9);
        // Twice the TTFT for the same prompt costs twice as much.
        assert!((input_cost(3.6, 2000.0, 1000).unwrap() - 2.0).abs() < 1e-9);
        assert_eq!(input_cost(3.6, 1000.0, 0), None);
        assert_eq!(output_cost(3.6, 0.0), None);
        assert_eq!(usd(0.012345), "0.0123");
        assert_eq!(usd(4.567), "4.57");
        assert_eq!(usd(12.34), "12.3");
        assert_eq!(usd(1234.4), "1234");
    }
}
