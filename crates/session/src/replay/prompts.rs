//! Prompts built from a trace's structure. Each block id maps to one fixed run of token ids,
//! drawn from the run's salt and the id alone: a few nonce ids (so two different blocks never
//! start alike, and the same block differs between runs with different salts), then a corpus
//! window chosen by the same draw. Requests that share leading ids therefore share exactly
//! those tokens and nothing more, and a rerun with a fresh salt shares nothing with the
//! previous run's cache. Tokens past a request's blocks are its own, drawn from the salt and
//! its index.

use std::sync::Arc;

use rand::{RngExt, SeedableRng};

use crate::corpus::Corpus;
use crate::prompt::NONCE_TOKENS;
use ctxbench_trace::TraceRequest;

/// Builds the token ids of trace requests.
#[derive(Debug, Clone)]
pub struct BlockPrompts {
    corpus: Arc<Corpus>,
    salt: u64,
    /// Tokens the server adds in front of a token-id prompt (BOS): they take the first
    /// places of block 0, so lengths are the server's own count.
    server_added: u64,
}

/// A 64-bit mix (splitmix64's finaliser): seeds for distinct (salt, id) pairs differ.
fn mix(salt: u64, id: u64, domain: u64) -> u64 {
    let mut z = salt ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ domain.rotate_left(32);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Seed domains: a block's tokens and a request's own tail never draw alike.
const BLOCK: u64 = 1;
const TAIL: u64 = 2;

impl BlockPrompts {
    /// Prompts from `corpus` under `salt`; `server_added` tokens are the server's own.
    pub fn new(corpus: Arc<Corpus>, salt: u64, server_added: u64) -> Self {
        BlockPrompts {
            corpus,
            salt,
            server_added,
        }
    }

    /// `len` ids of the run drawn from `seed`: nonce ids, then a corpus window.
    fn draw(&self, seed: u64, len: usize, out: &mut Vec<u32>) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let pool = &self.corpus.nonce_pool;
        let n_nonce = NONCE_TOKENS.min(len);
        if !pool.is_empty() {
            out.extend((0..n_nonce).map(|_| pool[rng.random_range(0..pool.len())]));
        }
        let have = if pool.is_empty() { 0 } else { n_nonce };
        let n = self.corpus.tokens.len().max(1);
        let offset = rng.random_range(0..n);
        out.extend(self.corpus.window(offset, len - have));
    }

    /// The ids to send for `r`: the server counts exactly `r.input_tokens` (with its own
    /// tokens in front). Block i covers server positions `[i·B, (i+1)·B)` (cut at the
    /// prompt's end); its ids are the first of the block's fixed run, so a partial block is
    /// a prefix of the whole one.
    pub fn build(&self, r: &TraceRequest) -> Vec<u32> {
        let total = r.input_tokens;
        let bt = u64::from(r.block_tokens.max(1));
        let mut out = Vec::with_capacity(total.saturating_sub(self.server_added) as usize);
        let mut pos = self.server_added.min(total);
        for (i, &id) in r.blocks.iter().enumerate() {
            let end = ((i as u64 + 1) * bt).min(total);
            if end <= pos {
                continue;
            }
            let mut block = Vec::with_capacity(bt as usize);
            self.draw(mix(self.salt, id, BLOCK), bt as usize, &mut block);
            // Block 0's first places are the server's own tokens: the block's run starts
            // after them, the same in every request that shares it.
            out.extend(block.iter().take((end - pos) as usize));
            pos = end;
        }
        if pos < total {
            self.draw(
                mix(self.salt, r.index, TAIL),
                (total - pos) as usize,
                &mut out,
            );
        }
        out
    }
}

/// A fresh salt from the OS: a run that does not give `--prompt-seed` shares no block with
/// any earlier run.
pub fn fresh_salt() -> u64 {
    rand::random()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Arc<Corpus> {
        Arc::new(Corpus {
            tokens: (1000..9000).collect(),
            nonce_pool: (1..500).collect(),
            tokenize_requests: 0,
            wraps: true,
            text: None,
        })
    }

    fn req(index: u64, input: u64, blocks: &[u64], bt: u32) -> TraceRequest {
        TraceRequest {
            index,
            session: None,
            turn: 0,
            at_ms: None,
            think_ms: None,
            input_tokens: input,
            output_tokens: 4,
            blocks: blocks.to_vec(),
            block_tokens: bt,
        }
    }

    fn common(a: &[u32], b: &[u32]) -> usize {
        a.iter().zip(b).take_while(|(x, y)| x == y).count()
    }

    #[test]
    fn shared_leading_blocks_share_exactly_their_tokens() {
        for added in [0, 1] {
            let p = BlockPrompts::new(corpus(), 7, added);
            let a = p.build(&req(0, 200, &[1, 2, 3], 64));
            let b = p.build(&req(1, 300, &[1, 2, 4, 5], 64));
            assert_eq!(a.len() as u64, 200 - added);
            assert_eq!(b.len() as u64, 300 - added);
            // Two whole blocks, in the server's count.
            assert_eq!(common(&a, &b) as u64 + added, 128);
            // A request whose blocks all lie in another's: its whole prompt is shared.
            let c = p.build(&req(2, 100, &[1, 2], 64));
            assert_eq!(common(&a, &c), c.len());
        }
    }

    #[test]
    fn a_partial_last_block_is_a_prefix_of_the_whole_block() {
        let p = BlockPrompts::new(corpus(), 7, 1);
        // Mooncake: ceil(700/512) ids, the last partial.
        let short = p.build(&req(0, 700, &[10, 11], 512));
        let long = p.build(&req(1, 1500, &[10, 11, 12], 512));
        assert_eq!(common(&short, &long), short.len());
    }

    #[test]
    fn tails_and_salts_never_match() {
        let p = BlockPrompts::new(corpus(), 7, 0);
        let a = p.build(&req(0, 100, &[1], 64));
        let b = p.build(&req(1, 100, &[1], 64));
        assert_eq!(common(&a, &b), 64, "the tails are each request's own");
        let q = BlockPrompts::new(corpus(), 8, 0);
        let a2 = q.build(&req(0, 100, &[1], 64));
        assert_eq!(
            common(&a, &a2),
            0,
            "another salt: block 0 differs from token 0"
        );
        assert_eq!(a, p.build(&req(0, 100, &[1], 64)), "same salt, same prompt");
    }
}
