//! Tokenizer dialects: how a server's tokenize endpoint wants its body, how its answer reads,
//! and the endpoint pair a generic server was found to have. Shared by every protocol that
//! tokenizes, so none of them imports another for it.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::http::Http;
use ctxbench_schema::error::ClientError;

/// How a server's `/tokenize` wants its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenizeDialect {
    /// `{"content": ...}` (llama.cpp).
    Llamacpp,
    /// `{"prompt": ..., "add_special_tokens": false}` (vLLM, SGLang).
    Vllm,
    /// The same `{"prompt"}` body on an SGLang server (named for the server in the header).
    Sglang,
    /// `{"input": ...}`, special tokens (BOS) always added (llama-cpp-python `/extras`).
    Extras,
}

impl TokenizeDialect {
    /// The name recorded in results, as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenizeDialect::Llamacpp => "llamacpp",
            TokenizeDialect::Vllm => "vllm",
            TokenizeDialect::Sglang => "sglang",
            TokenizeDialect::Extras => "extras",
        }
    }

    /// The body that tokenizes `text` without special tokens where the dialect allows it.
    pub(crate) fn tokenize_body(self, text: &str, model: Option<&str>) -> Value {
        let mut b = match self {
            TokenizeDialect::Llamacpp => {
                json!({"content": text, "add_special": false, "parse_special": false})
            }
            TokenizeDialect::Vllm | TokenizeDialect::Sglang => {
                json!({"prompt": text, "add_special_tokens": false})
            }
            TokenizeDialect::Extras => json!({"input": text}),
        };
        if let (Some(m), false) = (model, self == TokenizeDialect::Llamacpp) {
            b["model"] = json!(m);
        }
        b
    }
}

/// A tokenizer endpoint pair found on the server, recorded in the run header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextTokenizer {
    /// The body shape.
    pub dialect: TokenizeDialect,
    /// The tokenize path that answered (e.g. `/extras/tokenize`).
    pub tokenize_path: String,
    /// Its detokenize counterpart.
    pub detokenize_path: String,
    /// Special tokens the tokenize endpoint adds to every text (BOS), stripped from its
    /// answers: the length of its answer for an empty text.
    pub added_specials: usize,
    /// The server the pair is on when it is not the measured one (`--tokenizer-url`: the
    /// server behind a gateway); `None`: the measured server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The model named in tokenizer requests to `url` (that server's own model name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// The server's `POST /tokenize` in `dialect` (llama.cpp's `content`, or vLLM/SGLang's
/// `prompt` naming `model`), without special tokens so ids can be sliced and spliced. The
/// `/extras` pair is reached through its [`TextTokenizer`] paths instead.
pub async fn tokenize(
    http: &Http,
    dialect: TokenizeDialect,
    model: Option<&str>,
    text: &str,
) -> Result<Vec<u32>, ClientError> {
    let v = http
        .post_json(
            "/tokenize",
            &dialect.tokenize_body(text, model),
            Duration::from_secs(300),
        )
        .await?;
    parse_token_list("/tokenize", &v)
}

/// Reads `{"tokens":[...]}` (ids, or `{id, piece}` objects) into ids.
pub fn parse_token_list(endpoint: &str, v: &Value) -> Result<Vec<u32>, ClientError> {
    let arr = v
        .get("tokens")
        .and_then(Value::as_array)
        .ok_or_else(|| ClientError::Malformed {
            endpoint: endpoint.to_owned(),
            detail: "no `tokens` array in the answer".to_owned(),
        })?;
    arr.iter()
        .map(|t| {
            t.as_u64()
                .or_else(|| t.get("id").and_then(Value::as_u64))
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| ClientError::Malformed {
                    endpoint: endpoint.to_owned(),
                    detail: format!("token id is not a non-negative integer: {t}"),
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_lists_parse_in_both_shapes() {
        let v: Value = serde_json::from_str(r#"{"tokens":[1,2,3]}"#).unwrap();
        assert_eq!(parse_token_list("/t", &v).unwrap(), vec![1, 2, 3]);
        let v: Value = serde_json::from_str(r#"{"tokens":[{"id":5,"piece":"a"}]}"#).unwrap();
        assert_eq!(parse_token_list("/t", &v).unwrap(), vec![5]);
        let v: Value = serde_json::from_str(r#"{"tokens":[-1]}"#).unwrap();
        assert!(parse_token_list("/t", &v).is_err());
    }

    #[test]
    fn recorded_names_are_the_serialized_ones() {
        use TokenizeDialect::*;
        for d in [Llamacpp, Vllm, Sglang, Extras] {
            assert_eq!(serde_json::to_value(d).unwrap(), json!(d.as_str()));
        }
    }

    #[test]
    fn the_tokenize_bodies_are_the_ones_each_server_takes() {
        assert_eq!(
            TokenizeDialect::Llamacpp.tokenize_body("a", Some("m")),
            json!({"content": "a", "add_special": false, "parse_special": false})
        );
        assert_eq!(
            TokenizeDialect::Sglang.tokenize_body("a", Some("m")),
            json!({"prompt": "a", "add_special_tokens": false, "model": "m"})
        );
        assert_eq!(
            TokenizeDialect::Vllm.tokenize_body("a", None),
            json!({"prompt": "a", "add_special_tokens": false})
        );
    }
}
