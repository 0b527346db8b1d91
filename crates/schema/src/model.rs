//! What a model's shape says about the work of one token: the bytes a decode step must read
//! and the FLOPs a prefill must do. From the server's own words (llama.cpp `/v1/models`
//! `meta`, read by its family in the client) or from a Hugging Face `config.json`
//! (`--model-config`, parsed here). Recorded in the results header (`model_facts`); the
//! roofline of a report (`stats::roofline`) sets them against the hardware's limits. No I/O.
//!
//! Every figure here is meant as a lower bound on the work: where the shape leaves a choice
//! (an embedding table that may be tied, a causal attention mask), the smaller count is
//! taken, so that a figure built on it can be too modest but never impossible.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A model's size in the units of the roofline, with where each came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ModelFacts {
    /// Where these came from (`llama.cpp /v1/models meta`, `--model-config config.json`, or
    /// both joined by ` + `, the first one's figures winning).
    pub source: String,
    /// Parameters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<u64>,
    /// Bytes of all the weights (the model file's tensors).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight_bytes: Option<u64>,
    /// Bytes of the input embedding table when it is a tensor of its own: a step reads one
    /// row of it, so it is not part of what a step must read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedding_bytes: Option<u64>,
    /// Bytes of KV cache per token of context: 2 × layers × KV heads × head size × bytes per
    /// value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_bytes_per_token: Option<u64>,
    /// FLOPs per prompt token outside attention: 2 × the parameters of every matrix a
    /// prompt token goes through (not the embedding table, not the output head, which a
    /// prefill applies to its last token only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flops_per_token: Option<f64>,
    /// Attention FLOPs of a prefill of L tokens per L²: 2 × layers × heads × head size (the
    /// causal half of QKᵀ and of the weighted sum of V).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention_flops_per_token2: Option<f64>,
    /// Transformer layers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layers: Option<u64>,
    /// Hidden size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hidden: Option<u64>,
    /// KV heads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_heads: Option<u64>,
    /// Size of one attention head.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<u64>,
    /// The weights' type (`bfloat16`, `all F32`, …) as the source names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    /// What the source leaves unknown, and why a figure is missing.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Why a `config.json` could not be read as a model's shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A key the shape needs is not there.
    #[error("no `{0}` in it (a Hugging Face config.json names it)")]
    Missing(String),
    /// A key is there but its value is not usable.
    #[error("`{key}` is {value}: {why}")]
    Invalid {
        /// The key.
        key: String,
        /// Its value, as JSON.
        value: String,
        /// What was expected.
        why: String,
    },
    /// Not a JSON object at all.
    #[error("not a JSON object")]
    NotAnObject,
}

impl ModelFacts {
    /// Bytes a decode step must read for the weights: all of them but the input embedding
    /// table (one row of it per token).
    pub fn step_weight_bytes(&self) -> Option<u64> {
        self.weight_bytes
            .map(|w| w.saturating_sub(self.embedding_bytes.unwrap_or(0)))
    }

    /// These facts, with what they leave unknown taken from `other` (whose source is added).
    pub fn or(self, other: ModelFacts) -> ModelFacts {
        let source = match (self.source.is_empty(), other.source.is_empty()) {
            (true, _) => other.source.clone(),
            (false, true) => self.source.clone(),
            (false, false) => format!("{} + {}", self.source, other.source),
        };
        // Weight bytes and the embedding table are one pair: mixing one source's total
        // with the other's table would subtract the wrong table.
        let (weight_bytes, embedding_bytes) = match self.weight_bytes {
            Some(w) => (Some(w), self.embedding_bytes),
            None => (other.weight_bytes, other.embedding_bytes),
        };
        let mut notes = self.notes;
        notes.extend(other.notes);
        ModelFacts {
            source,
            params: self.params.or(other.params),
            weight_bytes,
            embedding_bytes,
            kv_bytes_per_token: self.kv_bytes_per_token.or(other.kv_bytes_per_token),
            flops_per_token: self.flops_per_token.or(other.flops_per_token),
            attention_flops_per_token2: self
                .attention_flops_per_token2
                .or(other.attention_flops_per_token2),
            layers: self.layers.or(other.layers),
            hidden: self.hidden.or(other.hidden),
            kv_heads: self.kv_heads.or(other.kv_heads),
            head_dim: self.head_dim.or(other.head_dim),
            dtype: self.dtype.or(other.dtype),
            notes,
        }
    }

    /// Facts from a server's parameter count and weight bytes (llama.cpp `n_params`,
    /// `size`), with its vocabulary and hidden size when known. The embedding table is
    /// taken at the file's mean bytes per parameter; FLOPs per prompt token leave out two
    /// vocabulary × hidden tables (the embedding and the output head: a tied model has one,
    /// so its count is a little low, never high).
    pub fn from_counts(
        source: &str,
        params: Option<u64>,
        weight_bytes: Option<u64>,
        vocab_hidden: Option<(u64, u64)>,
    ) -> ModelFacts {
        let table = vocab_hidden.map(|(v, h)| v.saturating_mul(h));
        let embedding_bytes = match (table, params, weight_bytes) {
            (Some(t), Some(p), Some(w)) if p > 0 => {
                Some((t as f64 * w as f64 / p as f64).round() as u64)
            }
            _ => None,
        };
        let flops_per_token = match (params, table) {
            (Some(p), Some(t)) => Some(p.saturating_sub(2 * t)),
            (Some(p), None) => Some(p),
            _ => None,
        }
        .filter(|m| *m > 0)
        .map(|m| 2.0 * m as f64);
        ModelFacts {
            source: source.to_owned(),
            params,
            weight_bytes,
            embedding_bytes,
            flops_per_token,
            hidden: vocab_hidden.map(|x| x.1),
            ..ModelFacts::default()
        }
    }

    /// Facts from a Hugging Face `config.json` (its top level, or its `text_config` for a
    /// multimodal model). `source` names the file.
    pub fn from_hf_config(source: &str, config: &Value) -> Result<ModelFacts, ConfigError> {
        let top = config.as_object().ok_or(ConfigError::NotAnObject)?;
        let c = match top.get("text_config").filter(|t| t.is_object()) {
            Some(t) if !top.contains_key("num_hidden_layers") => t,
            _ => config,
        };
        let shape = Shape::read(c, config)?;
        Ok(shape.facts(source, c))
    }
}

/// The numbers of a config that the facts are computed from.
struct Shape {
    layers: u64,
    heads: u64,
    kv_heads: u64,
    head_dim: u64,
    hidden: u64,
    intermediate: u64,
    vocab: u64,
    dtype: String,
    dtype_bytes: f64,
    tied: bool,
    gated: bool,
}

/// Model types whose MLP is one up and one down projection (no gate): 2 × hidden ×
/// intermediate parameters instead of 3.
const UNGATED: &[&str] = &[
    "gpt_neox",
    "gptj",
    "falcon",
    "opt",
    "bloom",
    "phi",
    "starcoder2",
    "gpt_bigcode",
    "mpt",
];

fn uint(c: &Value, key: &str) -> Result<Option<u64>, ConfigError> {
    match c.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64().filter(|n| *n > 0) {
            Some(n) => Ok(Some(n)),
            None => Err(ConfigError::Invalid {
                key: key.to_owned(),
                value: v.to_string(),
                why: "expected a positive whole number".to_owned(),
            }),
        },
    }
}

fn required(c: &Value, key: &str) -> Result<u64, ConfigError> {
    uint(c, key)?.ok_or_else(|| ConfigError::Missing(key.to_owned()))
}

/// Bytes per value of a torch dtype name.
fn dtype_bytes(name: &str) -> Option<f64> {
    let n = name.trim_start_matches("torch.");
    match n {
        "float32" | "float" => Some(4.0),
        "bfloat16" | "float16" | "half" => Some(2.0),
        _ if n.starts_with("float8") => Some(1.0),
        _ => None,
    }
}

impl Shape {
    fn read(c: &Value, top: &Value) -> Result<Shape, ConfigError> {
        let layers = required(c, "num_hidden_layers")?;
        let heads = required(c, "num_attention_heads")?;
        let hidden = required(c, "hidden_size")?;
        // Absent means one KV head per attention head (multi-head attention).
        let kv_heads = uint(c, "num_key_value_heads")?.unwrap_or(heads);
        let head_dim = match uint(c, "head_dim")? {
            Some(d) => d,
            None if hidden % heads == 0 => hidden / heads,
            None => {
                return Err(ConfigError::Invalid {
                    key: "hidden_size".to_owned(),
                    value: hidden.to_string(),
                    why: format!(
                        "not a multiple of num_attention_heads ({heads}), and no head_dim"
                    ),
                })
            }
        };
        let intermediate = required(c, "intermediate_size")?;
        let vocab = required(c, "vocab_size")?;
        // transformers ≥ 4.56 writes `dtype`; older files `torch_dtype`; a multimodal
        // config may keep it at the top level only.
        let dtype_value = ["torch_dtype", "dtype"]
            .iter()
            .flat_map(|k| [c.get(*k), top.get(*k)])
            .flatten()
            .find(|v| !v.is_null())
            .ok_or_else(|| ConfigError::Missing("torch_dtype".to_owned()))?;
        let dtype = dtype_value.as_str().unwrap_or_default().to_owned();
        let dtype_bytes = dtype_bytes(&dtype).ok_or_else(|| ConfigError::Invalid {
            key: "torch_dtype".to_owned(),
            value: dtype_value.to_string(),
            why: "expected float32, bfloat16, float16 or a float8 type".to_owned(),
        })?;
        // PretrainedConfig's default is tied, and config.json leaves defaults out.
        let tied = c
            .get("tie_word_embeddings")
            .or_else(|| top.get("tie_word_embeddings"))
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let model_type = c.get("model_type").and_then(Value::as_str).unwrap_or("");
        Ok(Shape {
            layers,
            heads,
            kv_heads,
            head_dim,
            hidden,
            intermediate,
            vocab,
            dtype,
            dtype_bytes,
            tied,
            gated: !UNGATED.contains(&model_type),
        })
    }

    /// Parameters of one layer's matrices: Q, K, V, O and the MLP.
    fn layer_params(&self) -> f64 {
        let (h, q, kv) = (
            self.hidden as f64,
            (self.heads * self.head_dim) as f64,
            (self.kv_heads * self.head_dim) as f64,
        );
        let mlp = if self.gated { 3.0 } else { 2.0 } * h * self.intermediate as f64;
        h * q + 2.0 * h * kv + q * h + mlp
    }

    fn facts(&self, source: &str, c: &Value) -> ModelFacts {
        let mut notes = Vec::new();
        let linear = self.layers as f64 * self.layer_params();
        let table = (self.vocab * self.hidden) as f64;
        let tables = if self.tied { 1.0 } else { 2.0 };
        let params = linear + tables * table;
        // Weights quantized below the dtype: the linear layers' width, when it can be read.
        let linear_bytes = match quantized_width(c) {
            Ok(Some(b)) => Some(b),
            Ok(None) => Some(self.dtype_bytes),
            Err(why) => {
                notes.push(why);
                None
            }
        };
        let experts = ["num_local_experts", "num_experts", "n_routed_experts"]
            .iter()
            .find_map(|k| c.get(*k).and_then(Value::as_u64).filter(|n| *n > 1));
        let (weight_bytes, flops) = match experts {
            Some(n) => {
                notes.push(format!("a mixture of {n} experts: the weights a step reads depend on the routing, so weight bytes and FLOPs per token are left out"));
                (None, None)
            }
            None => (
                linear_bytes.map(|b| (linear * b + tables * table * self.dtype_bytes) as u64),
                Some(2.0 * linear),
            ),
        };
        let mut kv =
            Some(2.0 * (self.layers * self.kv_heads * self.head_dim) as f64 * self.dtype_bytes);
        let mut attention = Some(2.0 * (self.layers * self.heads * self.head_dim) as f64);
        if let Some(why) = unusual_attention(c) {
            notes.push(why);
            kv = None;
            attention = None;
        }
        ModelFacts {
            source: source.to_owned(),
            params: (experts.is_none()).then_some(params as u64),
            weight_bytes,
            // A tied table is the output head too, which every step reads in full.
            embedding_bytes: weight_bytes.map(|_| match self.tied {
                true => 0,
                false => (table * self.dtype_bytes) as u64,
            }),
            kv_bytes_per_token: kv.map(|k| k as u64),
            flops_per_token: flops,
            attention_flops_per_token2: attention,
            layers: Some(self.layers),
            hidden: Some(self.hidden),
            kv_heads: Some(self.kv_heads),
            head_dim: Some(self.head_dim),
            dtype: Some(self.dtype.clone()),
            notes,
        }
    }
}

/// Bytes per weight of quantized linear layers (`quantization_config.bits`, or an fp8
/// method); `Ok(None)` without quantization; `Err` with why when the width cannot be told.
fn quantized_width(c: &Value) -> Result<Option<f64>, String> {
    let Some(q) = c.get("quantization_config").filter(|q| !q.is_null()) else {
        return Ok(None);
    };
    if let Some(bits) = q.get("bits").and_then(Value::as_u64).filter(|b| *b > 0) {
        return Ok(Some(bits as f64 / 8.0));
    }
    let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("");
    match method {
        "fp8" | "fbgemm_fp8" => Ok(Some(1.0)),
        _ => Err(format!("quantization_config (quant_method {method:?}) gives no bits: the weights' width is unknown, so weight bytes are left out")),
    }
}

/// Why the cache a step reads is not L × KV bytes per token (sliding windows, latent
/// attention), when it is not.
fn unusual_attention(c: &Value) -> Option<String> {
    let window = c.get("sliding_window").and_then(Value::as_u64);
    let used = c
        .get("use_sliding_window")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    if let (Some(w), true) = (window, used) {
        return Some(format!("sliding-window attention (sliding_window {w}): a step reads less than L tokens of cache in windowed layers, so KV bytes per token and attention FLOPs are left out"));
    }
    if let Some(r) = c.get("kv_lora_rank").filter(|v| !v.is_null()) {
        return Some(format!("latent attention (kv_lora_rank {r}): the cache is not K and V per head, so KV bytes per token and attention FLOPs are left out"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Llama-3.1-8B's config.json (the keys that matter).
    fn llama_8b() -> Value {
        json!({
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "model_type": "llama",
            "num_attention_heads": 32,
            "num_hidden_layers": 32,
            "num_key_value_heads": 8,
            "tie_word_embeddings": false,
            "torch_dtype": "bfloat16",
            "vocab_size": 128256
        })
    }

    #[test]
    fn llama_3_1_8b_in_bf16_has_its_known_size() {
        let f = ModelFacts::from_hf_config("config.json", &llama_8b()).unwrap();
        // 8.03 B parameters, 16.06 GB in BF16; 128 KiB of KV cache per token.
        let p = f.params.unwrap() as f64;
        assert!((p / 8.030e9 - 1.0).abs() < 0.002, "{p}");
        assert_eq!(f.weight_bytes, Some(2 * f.params.unwrap()));
        assert_eq!(f.kv_bytes_per_token, Some(2 * 32 * 8 * 128 * 2));
        assert_eq!(f.kv_bytes_per_token, Some(131_072));
        // A step reads all but the input table: 16.06 GB − 1.05 GB.
        assert_eq!(f.embedding_bytes, Some(128_256 * 4096 * 2));
        let step = f.step_weight_bytes().unwrap() as f64;
        assert!((step / 15.01e9 - 1.0).abs() < 0.002, "{step}");
        // 2 × the 6.98 B parameters of the 32 layers; attention 2 × 32 × 32 × 128 per L².
        assert!((f.flops_per_token.unwrap() / 13.96e9 - 1.0).abs() < 0.002);
        assert_eq!(f.attention_flops_per_token2, Some(262_144.0));
        assert_eq!(f.head_dim, Some(128));
        assert!(f.notes.is_empty(), "{:?}", f.notes);
    }

    #[test]
    fn a_missing_key_is_named() {
        for key in [
            "num_hidden_layers",
            "num_attention_heads",
            "hidden_size",
            "intermediate_size",
            "vocab_size",
            "torch_dtype",
        ] {
            let mut c = llama_8b();
            c.as_object_mut().unwrap().remove(key);
            let e = ModelFacts::from_hf_config("c", &c).unwrap_err();
            assert_eq!(e, ConfigError::Missing(key.to_owned()));
            assert!(e.to_string().contains(key), "{e}");
        }
        let mut c = llama_8b();
        c["torch_dtype"] = json!("int3");
        let e = ModelFacts::from_hf_config("c", &c).unwrap_err();
        assert!(e.to_string().contains("torch_dtype") && e.to_string().contains("int3"));
        assert_eq!(
            ModelFacts::from_hf_config("c", &json!([1])).unwrap_err(),
            ConfigError::NotAnObject
        );
    }

    #[test]
    fn shapes_that_change_the_reads_leave_those_figures_out_and_say_why() {
        let mut c = llama_8b();
        c["num_local_experts"] = json!(8);
        let f = ModelFacts::from_hf_config("c", &c).unwrap();
        assert_eq!((f.weight_bytes, f.flops_per_token), (None, None));
        assert!(f.kv_bytes_per_token.is_some() && f.notes[0].contains("experts"));
        let mut c = llama_8b();
        c["sliding_window"] = json!(4096);
        let f = ModelFacts::from_hf_config("c", &c).unwrap();
        assert_eq!(f.kv_bytes_per_token, None);
        assert!(f.weight_bytes.is_some() && f.notes[0].contains("sliding"));
        // Qwen2 names a window it does not use.
        c["use_sliding_window"] = json!(false);
        let f = ModelFacts::from_hf_config("c", &c).unwrap();
        assert!(f.kv_bytes_per_token.is_some() && f.notes.is_empty());
        // AWQ: 4-bit linear layers, BF16 tables.
        let mut c = llama_8b();
        c["quantization_config"] = json!({"quant_method": "awq", "bits": 4});
        let w = ModelFacts::from_hf_config("c", &c)
            .unwrap()
            .weight_bytes
            .unwrap();
        assert!((w as f64 / (6.98e9 * 0.5 + 2.0 * 0.525e9 * 2.0) - 1.0).abs() < 0.01);
        c["quantization_config"] = json!({"quant_method": "compressed-tensors"});
        let f = ModelFacts::from_hf_config("c", &c).unwrap();
        assert!(f.weight_bytes.is_none() && f.notes[0].contains("quantization_config"));
    }

    #[test]
    fn a_multimodal_config_is_read_from_its_text_config() {
        let c = json!({"text_config": llama_8b(), "model_type": "llava"});
        let f = ModelFacts::from_hf_config("c", &c).unwrap();
        assert_eq!(f.layers, Some(32));
    }

    #[test]
    fn server_counts_leave_out_the_tables_and_the_config_fills_the_rest() {
        // The wide reference model: 84,282,496 f32 parameters, 32000 × 128 tables.
        let s = ModelFacts::from_counts(
            "llama.cpp /v1/models meta",
            Some(84_282_496),
            Some(337_129_984),
            Some((32_000, 128)),
        );
        assert_eq!(s.embedding_bytes, Some(32_000 * 128 * 4));
        assert_eq!(s.step_weight_bytes(), Some(337_129_984 - 16_384_000));
        assert_eq!(
            s.flops_per_token,
            Some(2.0 * (84_282_496 - 2 * 4_096_000) as f64)
        );
        let both = s
            .clone()
            .or(ModelFacts::from_hf_config("w.json", &llama_8b()).unwrap());
        // The server's own bytes win; the config adds the cache and the attention.
        assert_eq!(both.weight_bytes, Some(337_129_984));
        assert_eq!(both.embedding_bytes, s.embedding_bytes);
        assert_eq!(both.kv_bytes_per_token, Some(131_072));
        assert_eq!(both.source, "llama.cpp /v1/models meta + w.json");
    }

    #[test]
    fn old_headers_without_facts_and_facts_without_fields_still_read() {
        let f: ModelFacts = serde_json::from_str(r#"{"source":"x"}"#).unwrap();
        assert_eq!(f.weight_bytes, None);
        let back: ModelFacts = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
        assert_eq!(back, f);
    }
}
