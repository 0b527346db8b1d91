//! Writes a generated Mooncake-format trace to standard output, for measuring the dry run's
//! memory on a large trace (docs/replay.md): `cargo run --release -p ctxbench-trace
//! --example gen_mooncake -- 1000000 > /tmp/mooncake-1m.jsonl`.
//!
//! Deterministic: 2,000 system prompts of 1-8 blocks; each request continues one of up to
//! 5,000 open conversations (60%: its previous prompt plus 1-4 fresh blocks) or starts one
//! from a system prompt; conversations end at 64 blocks (32k tokens); arrivals ~3.6 ms apart
//! (a million requests in about an hour, as Mooncake's one sampled hour).

use std::io::{BufWriter, Write};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn main() -> std::io::Result<()> {
    let lines: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let mut rng = Rng(42);
    let mut next_id = 0u64;
    let mut fresh = |n: u64, out: &mut Vec<u64>| {
        out.extend(next_id..next_id + n);
        next_id += n;
    };
    let mut systems = Vec::new();
    for _ in 0..2000 {
        let mut s = Vec::new();
        fresh(1 + rng.below(8), &mut s);
        systems.push(s);
    }
    let mut open: Vec<Vec<u64>> = Vec::new();
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut t = 0u64;
    let mut line = String::new();
    for _ in 0..lines {
        let pick = rng.below(10) < 6 && !open.is_empty();
        let blocks = if pick {
            let i = rng.below(open.len() as u64) as usize;
            let k = 1 + rng.below(4);
            fresh(k, &mut open[i]);
            if open[i].len() >= 64 {
                open.swap_remove(i)
            } else {
                open[i].clone()
            }
        } else {
            let mut b = systems[rng.below(systems.len() as u64) as usize].clone();
            fresh(1 + rng.below(8), &mut b);
            if open.len() < 5000 {
                open.push(b.clone());
            } else {
                let i = rng.below(open.len() as u64) as usize;
                open[i] = b.clone();
            }
            b
        };
        let input = (blocks.len() as u64 - 1) * 512 + 1 + rng.below(512);
        let output = 1 + rng.below(1000);
        t += rng.below(8);
        line.clear();
        line.push_str(&format!("{{\"timestamp\": {t}, \"input_length\": {input}, \"output_length\": {output}, \"hash_ids\": ["));
        for (j, id) in blocks.iter().enumerate() {
            if j > 0 {
                line.push_str(", ");
            }
            line.push_str(&id.to_string());
        }
        line.push_str("]}\n");
        out.write_all(line.as_bytes())?;
    }
    out.flush()
}
