//! Needle checks (`--needle`): an exact-length cold prompt holding a short fact with a
//! random value at a stated depth, ending with a question that asks for it; the greedy
//! answer is checked for the value.
//!
//! The prompt is plain text continued by the model ("… The secret number is"), sent to the
//! completions API with no chat template: base and instruction-tuned models both continue
//! it, and the check reads only whether the value appears in the first tokens.

use rand::{RngExt, SeedableRng};

use ctxbench_schema::record::NeedleVerdict;

/// Tokens generated for a needle answer: a 5-digit value, a leading space and some slack.
pub const ANSWER_TOKENS: u32 = 12;

/// Default depths, in percent of the filler before the fact.
pub const DEFAULT_DEPTHS: [u32; 3] = [10, 50, 90];

/// The question that ends every needle prompt; the model continues it with the value.
pub const QUESTION: &str =
    "\n\nQuestion: What is the secret number mentioned above? Answer: The secret number is";

/// The fact placed at depth, stating `value`.
pub fn fact(value: &str) -> String {
    format!("\nThe secret number is {value}. Remember it.\n")
}

/// Draws the random values of a run: from `--prompt-seed` when given (so two runs with
/// the same seed ask for the same values), from the OS otherwise.
#[derive(Debug)]
pub struct Values {
    rng: rand::rngs::StdRng,
}

impl Values {
    /// Values seeded from `seed`, or from the OS.
    pub fn new(seed: Option<u64>) -> Self {
        // Offset so the values do not replay the prompt builder's nonce draws.
        let rng = match seed {
            Some(s) => rand::rngs::StdRng::seed_from_u64(s ^ 0x6e65_6564_6c65_0001),
            None => rand::rngs::StdRng::from_rng(&mut rand::rng()),
        };
        Values { rng }
    }

    /// A fresh 5-digit value.
    pub fn next_value(&mut self) -> String {
        self.rng.random_range(10_000u32..100_000).to_string()
    }
}

/// A needle prompt and where its parts are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// The prompt ids: nonce, filler, fact, filler, question; as long as the base prompt.
    pub prompt: Vec<u32>,
    /// Index of the fact's first token.
    pub fact_at: usize,
}

/// Places `fact` at `depth_pct` of the filler of `base` (an exact-length prompt whose
/// first `nonce_tokens` ids are its nonce) and ends it with `question`, keeping the length
/// of `base`. `None` when the prompt is too short to hold both.
pub fn place(
    base: &[u32],
    nonce_tokens: usize,
    fact: &[u32],
    question: &[u32],
    depth_pct: u32,
) -> Option<Placed> {
    let n_nonce = nonce_tokens.min(base.len());
    let filler_len = base
        .len()
        .checked_sub(n_nonce + fact.len() + question.len())?;
    let filler = &base[n_nonce..n_nonce + filler_len];
    let k = (filler_len as u64 * u64::from(depth_pct.min(100)) / 100) as usize;
    let mut prompt = Vec::with_capacity(base.len());
    prompt.extend_from_slice(&base[..n_nonce]);
    prompt.extend_from_slice(&filler[..k]);
    prompt.extend_from_slice(fact);
    prompt.extend_from_slice(&filler[k..]);
    prompt.extend_from_slice(question);
    Some(Placed {
        prompt,
        fact_at: n_nonce + k,
    })
}

/// Whether `answer` states `value`: the digits appear, not as part of a longer number.
pub fn check(answer: &str, value: &str) -> NeedleVerdict {
    let found = answer.match_indices(value).any(|(i, m)| {
        let before = answer[..i].chars().next_back();
        let after = answer[i + m.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_digit()) && !after.is_some_and(|c| c.is_ascii_digit())
    });
    if found {
        NeedleVerdict::Pass
    } else {
        NeedleVerdict::Fail
    }
}

/// Parses `--needle-depths` (`10,50,90`): percentages from 0 to 100.
pub fn parse_depths(s: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let d: u32 = part.trim_end_matches('%').parse().map_err(|_| {
            format!("needle depth '{part}' is not a whole percentage (e.g. 10,50,90)")
        })?;
        if d > 100 {
            return Err(format!("needle depth {d}% is beyond 100%"));
        }
        if !out.contains(&d) {
            out.push(d);
        }
    }
    if out.is_empty() {
        return Err("--needle-depths needs at least one percentage (e.g. 10,50,90)".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fact_sits_at_its_depth_and_the_length_is_kept() {
        let base: Vec<u32> = (0..108).collect();
        let fact = [900, 901, 902];
        let q = [800, 801];
        for (depth, at) in [(0, 8), (50, 8 + 47), (100, 8 + 95)] {
            let p = place(&base, 8, &fact, &q, depth).unwrap();
            assert_eq!(p.prompt.len(), base.len());
            assert_eq!(p.fact_at, at);
            assert_eq!(&p.prompt[..8], &base[..8], "the nonce stays at token 0");
            assert_eq!(&p.prompt[p.fact_at..p.fact_at + 3], &fact);
            assert_eq!(&p.prompt[106..], &q);
        }
        assert!(place(&base[..12], 8, &fact, &q, 50).is_none());
    }

    #[test]
    fn the_check_wants_the_whole_number() {
        assert_eq!(check(" 48213. Remember", "48213"), NeedleVerdict::Pass);
        assert_eq!(check(" 148213", "48213"), NeedleVerdict::Fail);
        assert_eq!(check(" 482130", "48213"), NeedleVerdict::Fail);
        assert_eq!(check(" the the the", "48213"), NeedleVerdict::Fail);
        assert_eq!(check("", "48213"), NeedleVerdict::Fail);
    }

    #[test]
    fn seeded_values_repeat() {
        let a: Vec<_> = (0..5)
            .map({
                let mut v = Values::new(Some(3));
                move |_| v.next_value()
            })
            .collect();
        let mut v = Values::new(Some(3));
        assert_eq!(a, (0..5).map(|_| v.next_value()).collect::<Vec<_>>());
        assert!(a.iter().all(|x| x.len() == 5));
    }

    #[test]
    fn depths_parse_and_refuse_nonsense() {
        assert_eq!(parse_depths("10,50,90").unwrap(), vec![10, 50, 90]);
        assert_eq!(parse_depths("25%, 75").unwrap(), vec![25, 75]);
        assert!(parse_depths("120").is_err());
        assert!(parse_depths("x").is_err());
        assert!(parse_depths("").is_err());
    }
}
