//! ctxbench against FastChat (PyPI `fschat` 0.2.36: controller, one Hugging Face model worker
//! with transformers 4.57.6 and torch 2.15.0 on CPU serving the tiny random-weight Llama of
//! `scripts/make-tiny-hf-model.py` as `tiny-llama`, and its OpenAI API server), started by
//! `scripts/reference-server fastchat`. A server from the package registries that issue 42's
//! first contacts did not include: it has no tokenizer endpoint, takes text on
//! `/v1/completions`, and fails a token-id prompt there with an error (it decodes the ids
//! with tiktoken's `cl100k_base`, which it cannot fetch offline), while its chat endpoint puts
//! its conversation template's system prompt before the user's message. ctxbench must read
//! that failure as ids refused, not as no `/v1/completions`: it measures text prompts there,
//! calibrated against the server's own count, never goes to chat, and states each
//! capability once. Run by `scripts/test-real-servers real_fastchat::`.

use crate::common;

use common::real::{read_lines, Family, RealServer};
use common::{argv, sweep};

#[test]
fn real_fastchat_refusing_token_ids_is_measured_with_text_on_completions_never_chat_only() {
    let srv = RealServer::start(Family::Fastchat, &[]);
    let run = sweep(
        &srv.url(),
        &argv("--contexts 256,512 --reps 2 --output-tokens 8"),
    );
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, srv.log_text());
    let l = read_lines(&run.out);
    let server = &l.header["server"];
    assert_eq!(server["endpoint"], "/v1/completions", "{server}");
    assert_eq!(server["token_id_prompts"], false, "{server}");
    assert!(server["tokenizer"].is_null(), "{server}");
    let method = server["prompt_method"].as_str().unwrap_or("");
    assert!(method.contains("calibrated"), "{method}");
    // The token-id prompt failed with an error, and that was read as ids refused.
    assert!(
        run.stderr.contains("a token-id prompt was refused"),
        "{}",
        run.stderr
    );
    // Each capability stated once, and no chat-only note anywhere.
    assert!(!run.stderr.contains("chat-only"), "{}", run.stderr);
    assert_eq!(
        run.stderr.matches("token-id prompts").count(),
        1,
        "{}",
        run.stderr
    );
    assert!(
        !srv.log_text().contains("/v1/chat/completions"),
        "a request went to chat:\n{}",
        srv.log_text()
    );
    assert_eq!(l.samples.len(), 4, "{}", run.stderr);
    for s in &l.samples {
        assert_eq!(s["status"], "ok", "{s}\n{}", run.stderr);
        assert_ne!(s["contaminated"], true, "{s}");
    }
}
