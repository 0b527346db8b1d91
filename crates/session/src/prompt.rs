//! Exact-length token-id prompts with a unique nonce at token 0.
//!
//! A nonce at the *start* makes every prompt's first token differ, so no prefix cache can
//! match more than zero tokens; a suffix nonce would leave the whole body cacheable.

use rand::{RngExt, SeedableRng};

use crate::corpus::Corpus;

/// Tokens of nonce at the start of every prompt.
pub const NONCE_TOKENS: usize = 8;

/// Builds prompts from a corpus.
#[derive(Debug)]
pub struct PromptBuilder {
    // Shared, so a session can hold the corpus and the builder side by side.
    corpus: std::sync::Arc<Corpus>,
    rng: rand::rngs::StdRng,
    nonce: bool,
    /// Tokens the server adds by itself (BOS), measured by the warmup.
    server_added: u64,
    /// First tokens used so far: no two prompts of a run may share even token 0, since a
    /// per-token radix cache (SGLang) would report that one token as cached.
    used_first: std::collections::HashSet<u32>,
}

impl PromptBuilder {
    /// A builder; `nonce: false` sends identical prompts on purpose (the cache trap
    /// `--nonce off` demonstrates).
    pub fn new(corpus: std::sync::Arc<Corpus>, nonce: bool) -> Self {
        PromptBuilder {
            corpus,
            rng: rand::rngs::StdRng::from_rng(&mut rand::rng()),
            nonce,
            server_added: 0,
            used_first: std::collections::HashSet::new(),
        }
    }

    /// Draws nonces from `seed` instead of the OS (`--prompt-seed`): two runs with the same
    /// seed and options send the same prompts.
    pub fn seeded(mut self, seed: u64) -> Self {
        self.rng = rand::rngs::StdRng::seed_from_u64(seed);
        self
    }

    /// Records how many tokens the server adds to a token-id prompt (0, or 1 for BOS).
    pub fn set_server_added(&mut self, n: u64) {
        self.server_added = n;
    }

    /// Tokens the server adds by itself.
    pub fn server_added(&self) -> u64 {
        self.server_added
    }

    /// A prompt that the server will count as exactly `target` tokens. `window` picks the
    /// corpus window, so repetitions read different text.
    pub fn build(&mut self, target: u64, window: u64) -> Vec<u32> {
        let len = target.saturating_sub(self.server_added) as usize;
        let mut p = Vec::with_capacity(len);
        let n_nonce = if self.nonce { NONCE_TOKENS.min(len) } else { 0 };
        if n_nonce > 0 {
            p.push(self.fresh_first());
        }
        let corpus = std::sync::Arc::clone(&self.corpus);
        let pool = &corpus.nonce_pool;
        for _ in 1..n_nonce {
            p.push(pool[self.rng.random_range(0..pool.len())]);
        }
        let offset = self.offset(window) as usize;
        p.extend(self.corpus.window(offset, len - n_nonce));
        p
    }

    /// Where window `window`'s body starts in the corpus (tokens): windows are spread over
    /// the corpus with a large odd stride; without a nonce every prompt starts at 0.
    pub fn offset(&self, window: u64) -> u64 {
        let n = self.corpus.tokens.len().max(1);
        if self.nonce {
            ((window as usize).wrapping_mul(7919) % n) as u64
        } else {
            0
        }
    }
}

impl PromptBuilder {
    /// `len` corpus tokens without a nonce, from window `window`: text appended to a
    /// cached prefix (a new user turn of `--mode conversation`).
    pub fn continuation(&self, len: u64, window: u64) -> Vec<u32> {
        let n = self.corpus.tokens.len().max(1);
        let offset = (window as usize).wrapping_mul(7919) % n;
        self.corpus.window(offset, len as usize).collect()
    }

    /// First tokens earlier runs against this server used (a prefix cache that was not
    /// flushed still holds their prompts): avoided as long as the pool has others.
    pub fn avoid_first(&mut self, ids: impl IntoIterator<Item = u32>) {
        let room = self.corpus.nonce_pool.len() / 2;
        self.used_first.extend(ids.into_iter().take(room));
    }

    /// Every first token used or avoided so far.
    pub fn used_first(&self) -> impl Iterator<Item = u32> + '_ {
        self.used_first.iter().copied()
    }

    /// A first token no earlier prompt of this run started with, while the pool has one.
    fn fresh_first(&mut self) -> u32 {
        let pool = &self.corpus.nonce_pool;
        let mut pick = pool[self.rng.random_range(0..pool.len())];
        if self.used_first.contains(&pick) && self.used_first.len() < pool.len() {
            // Rejection sampling is fast while the pool is mostly free; scan otherwise.
            pick = (0..64)
                .map(|_| pool[self.rng.random_range(0..pool.len())])
                .find(|t| !self.used_first.contains(t))
                .or_else(|| pool.iter().copied().find(|t| !self.used_first.contains(t)))
                .unwrap_or(pick);
        }
        self.used_first.insert(pick);
        pick
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Corpus {
        Corpus {
            tokens: (100..1100).collect(),
            nonce_pool: (1..60).collect(),
            tokenize_requests: 0,
            wraps: true,
            text: None,
        }
    }

    #[test]
    fn exact_length_with_and_without_bos() {
        let c = corpus();
        let mut b = PromptBuilder::new(std::sync::Arc::new(c.clone()), true);
        assert_eq!(b.build(4096, 0).len(), 4096);
        b.set_server_added(1);
        assert_eq!(b.build(4096, 1).len(), 4095);
    }

    #[test]
    fn nonce_makes_first_tokens_differ() {
        let c = corpus();
        let mut b = PromptBuilder::new(std::sync::Arc::new(c.clone()), true);
        let prompts: Vec<_> = (0..50).map(|i| b.build(64, i)).collect();
        let mut heads: Vec<_> = prompts.iter().map(|p| p[..NONCE_TOKENS].to_vec()).collect();
        heads.sort();
        heads.dedup();
        assert_eq!(heads.len(), 50, "nonces must be unique");
        assert!(prompts
            .iter()
            .all(|p| p[..NONCE_TOKENS].iter().all(|t| *t < 60)));
    }

    #[test]
    fn no_two_prompts_share_their_first_token_while_the_pool_lasts() {
        let c = corpus(); // a pool of 59 ids
        let mut b = PromptBuilder::new(std::sync::Arc::new(c.clone()), true);
        let mut firsts: Vec<u32> = (0..59).map(|i| b.build(64, i)[0]).collect();
        firsts.sort_unstable();
        firsts.dedup();
        assert_eq!(firsts.len(), 59);
        // Past the pool's size prompts still get built (and verification catches any hit).
        assert_eq!(b.build(64, 60).len(), 64);
    }

    #[test]
    fn first_tokens_of_earlier_runs_are_avoided() {
        let c = corpus(); // a pool of 59 ids
        let mut b = PromptBuilder::new(std::sync::Arc::new(c.clone()), true);
        b.avoid_first(1..20);
        for w in 0..20 {
            let p = b.build(64, w);
            assert!(
                p[0] >= 20,
                "first token {} was used by an earlier run",
                p[0]
            );
        }
        // At most half the pool is reserved by history, so a run always has fresh ids.
        let mut b = PromptBuilder::new(std::sync::Arc::new(c.clone()), true);
        b.avoid_first(1..60);
        assert_eq!(b.used_first().count(), 29);
    }

    #[test]
    fn without_nonce_prompts_repeat_exactly() {
        let c = corpus();
        let mut b = PromptBuilder::new(std::sync::Arc::new(c.clone()), false);
        assert_eq!(b.build(300, 0), b.build(300, 5));
    }
}
