//! Writes a generated Weka folder, for measuring the reader's memory on an agentic trace
//! (docs/replay.md): `cargo run --release -p ctxbench-trace --example gen_weka -- 200 100
//! /tmp/weka-200x100`. S sessions (one file each, `hash_id_scope: local`, block 64) of T
//! requests, each the previous prompt plus 500 tokens, 10 s of think time apart.

use std::io::{BufWriter, Write};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (sessions, turns) = (num(1, 200), num(2, 100));
    let dir = std::path::PathBuf::from(args.get(3).map_or("weka-trace", |s| s.as_str()));
    std::fs::create_dir_all(&dir)?;
    for s in 0..sessions {
        let mut requests = Vec::with_capacity(turns);
        for t in 0..turns {
            let input = 500 * (t as u64 + 1);
            let ids: Vec<u64> = (0..input / 64).collect();
            requests.push(serde_json::json!({
                "t": t as f64 * 10.0, "type": "n", "in": input, "out": 64,
                "hash_ids": ids, "think_time": 10.0, "api_time": 1.0,
            }));
        }
        let doc = serde_json::json!({
            "id": format!("s{s}"), "block_size": 64, "hash_id_scope": "local",
            "requests": requests,
        });
        let mut f = BufWriter::new(std::fs::File::create(dir.join(format!("s{s:05}.json")))?);
        serde_json::to_writer(&mut f, &doc)?;
        f.flush()?;
    }
    Ok(())
}
