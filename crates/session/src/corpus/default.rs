//! `--corpus auto`, the default: the repeated sentence, except where the server is known to
//! speculate, where it is text that does not repeat itself: natural text when the longest
//! prompt fits in it (up to [`NATURAL_MAX_TOKENS`]), else code (the Python standard library,
//! millions of tokens), also when the longest prompt is not known before the server is asked.
//! Natural text is ~750 KB of prose (~180k tokens with llama's tokenizer, fewer with coarser
//! ones): a longer prompt would wrap around it and repeat itself at exactly the lengths where
//! speculation is asked about, so a run that reaches past it measures code instead, the whole
//! run on one text. On the repeated sentence a draft finds every continuation in the prompt,
//! so acceptance (and the speedup) measured on it says nothing about a user's text
//! (docs/speculation.md: 4.8× inflation at 1k with n-gram drafts); a plain server's timing
//! does not depend on the text, so elsewhere the default stays what it was.
//! A server is known to speculate when its command line (`--server-cmd`, with every `-F`/`-L`
//! value) carries a speculative flag, or when the probe reports a speculative algorithm.

use ctxbench_client::ServerProfile;

/// The default `--corpus`: resolved by [`choose`].
pub const AUTO: &str = "auto";

/// The longest prompt `auto` measures on natural text: 128k, below what natural text holds
/// with any tokenizer we know (~180k tokens with llama's, ~160k with coarser ones).
pub const NATURAL_MAX_TOKENS: u64 = 128 * 1024;

/// Whether one command-line word turns speculation on: llama-server (`-md`,
/// `--model-draft`, `-hfd`, `-hfrd`, `--hf-repo-draft`, `--spec-*`, `--draft*`), vLLM
/// (`--speculative-config`, `--num-speculative-tokens`), SGLang (`--speculative-*`), TGI
/// (`--speculate`).
fn speculative_word(w: &str) -> bool {
    let flag = w.split('=').next().unwrap_or(w);
    matches!(
        flag,
        "-md" | "--model-draft" | "-hfd" | "-hfrd" | "--hf-repo-draft" | "--num-speculative-tokens"
    ) || flag.starts_with("--spec")
        || flag.starts_with("--draft")
}

/// Whether a server command line (its template and the values put into it) speculates.
pub fn command_speculates<'a>(words: impl IntoIterator<Item = &'a str>) -> bool {
    words
        .into_iter()
        .flat_map(str::split_whitespace)
        .any(speculative_word)
}

/// Whether the probe saw a speculative algorithm on (SGLang's `/server_info`
/// `speculative_algorithm`, recorded as `… (ALGO on)`).
pub fn probe_speculates(p: &ServerProfile) -> bool {
    p.spec_stats.as_deref().is_some_and(|s| s.ends_with(" on)"))
}

/// The corpus `--corpus auto` stands for, given whether the server speculates and the
/// longest prompt of the plan (`None`: not known yet), and a note saying why when it is not
/// the repeated sentence (or when the text wanted was not found).
pub fn choose(speculates: bool, longest: Option<u64>) -> (&'static str, Option<String>) {
    if !speculates {
        return ("repeat", None);
    }
    let natural_fits = longest.is_some_and(|l| l <= NATURAL_MAX_TOKENS);
    let natural = super::natural::resolve().is_ok();
    let code = super::code::resolve().is_ok();
    let why = "because the server speculates (the repeated sentence inflates acceptance); --corpus repeat measures it anyway";
    match (natural_fits, natural, code) {
        (true, true, _) => ("natural", Some(format!("corpus: natural text, {why}"))),
        (_, _, true) => (
            "code",
            Some(format!(
                "corpus: code (the Python standard library), {why}; natural text holds ~180k tokens and would repeat itself {}",
                longest.map_or("if the prompts grow past it".to_owned(), |l| format!("at {l} tokens"))
            )),
        ),
        (_, true, false) => (
            "natural",
            Some(format!("corpus: natural text, {why}; no Python standard library was found for a longer text, so prompts past ~180k tokens wrap (give --corpus PATH)")),
        ),
        (_, false, false) => (
            "repeat",
            Some("corpus: the server speculates, but no natural text or code was found on this machine: the repeated sentence inflates acceptance; give --corpus PATH".to_owned()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speculative_flags_of_each_server_are_recognised_and_plain_ones_are_not() {
        for cmd in [
            "llama-server -m t.gguf -md d.gguf",
            "llama-server -m t.gguf --spec-type ngram-simple",
            "llama-server -m t.gguf --draft-max=8 -md d.gguf",
            "vllm serve m --speculative-config '{\"method\":\"ngram\"}'",
            "python -m sglang.launch_server --speculative-algorithm EAGLE",
            "text-generation-launcher --speculate 3",
        ] {
            assert!(command_speculates([cmd]), "{cmd}");
        }
        for cmd in [
            "llama-server -m t.gguf -c 8192 -np 1 --port {port}",
            "vllm serve m --max-model-len 32768",
        ] {
            assert!(!command_speculates([cmd]), "{cmd}");
        }
        // A flag list's values count: the speculative variant of a campaign.
        assert!(command_speculates([
            "llama-server -m t {spec}",
            "",
            "-md d.gguf"
        ]));
        assert_eq!(choose(false, Some(1024)), ("repeat", None));
    }

    #[test]
    fn past_what_natural_text_holds_auto_measures_code_which_never_wraps() {
        let short = choose(true, Some(8192)).0;
        let long = choose(true, Some(200_000)).0;
        let unknown = choose(true, None).0;
        if super::super::natural::resolve().is_ok() {
            assert_eq!(short, "natural");
        }
        if super::super::code::resolve().is_ok() {
            assert_eq!(long, "code");
            assert_eq!(
                unknown, "code",
                "lengths not known yet: the text that cannot wrap"
            );
        }
    }

    #[test]
    fn the_probe_sees_sglangs_algorithm_only_when_it_is_on() {
        let mut p = ServerProfile::new("http://h:1".into(), ctxbench_client::BackendKind::Openai);
        assert!(!probe_speculates(&p));
        p.spec_stats = Some("sglang meta_info spec_* (EAGLE on)".into());
        assert!(probe_speculates(&p));
        p.spec_stats = Some("sglang meta_info spec_* (when a speculative algorithm is set)".into());
        assert!(!probe_speculates(&p));
        p.spec_stats =
            Some("llamacpp timings draft_n/draft_n_accepted (when a draft is configured)".into());
        assert!(!probe_speculates(&p));
    }
}
