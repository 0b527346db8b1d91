//! `--corpus auto`, the default: the repeated sentence, except where the server is known to
//! speculate, where it is natural text. On the repeated sentence a draft finds every
//! continuation in the prompt, so acceptance (and the speedup) measured on it says nothing
//! about a user's text (docs/speculation.md: 4.8× inflation at 1k with n-gram drafts); a plain
//! server's timing does not depend on the text, so elsewhere the default stays what it was.
//! A server is known to speculate when its command line (`--server-cmd`, with every `-F`/`-L`
//! value) carries a speculative flag, or when the probe reports a speculative algorithm.

use ctxbench_client::ServerProfile;

/// The default `--corpus`: resolved by [`choose`].
pub const AUTO: &str = "auto";

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

/// The corpus `--corpus auto` stands for, and a note saying why when it is not the repeated
/// sentence (or when natural text was wanted and none was found).
pub fn choose(speculates: bool) -> (&'static str, Option<String>) {
    if !speculates {
        return ("repeat", None);
    }
    match super::natural::resolve() {
        Ok(_) => (
            "natural",
            Some("corpus: natural text, because the server speculates (the repeated sentence inflates acceptance); --corpus repeat measures it anyway".to_owned()),
        ),
        Err(_) => (
            "repeat",
            Some("corpus: the server speculates, but no natural text was found on this machine: the repeated sentence inflates acceptance; give --corpus PATH".to_owned()),
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
        assert_eq!(choose(false), ("repeat", None));
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
