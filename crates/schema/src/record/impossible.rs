//! The evidence of the `impossible_timing` flag: where a sample's client timings contradict
//! the server's own numbers for the same request, both numbers. The rule that finds them is
//! `sample::impossible`'s; reports read only this.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

string_enum! {
    /// Which physical bound a sample's client timings broke.
    Check {
        /// The first token arrived sooner after the request than the server says it spent
        /// reading the prompt (`ttft_ms` < `server.prompt_ms`): the client cannot receive a
        /// token before the prefill that makes it.
        Ttft = "ttft",
        /// The last token arrived sooner after the request than the server's own prompt and
        /// decode time together (`prompt_ms + predicted_ms`): the client decoded faster than
        /// the server, by more than a late first token can explain.
        Decode = "decode",
        /// The stream had more token-carrying events than the server says it generated
        /// tokens (`predicted_n`, or its usage count): some event claimed a token that was
        /// never made.
        Tokens = "tokens",
    }
}

/// One broken bound: what the client measured, what the server said, and how far the
/// client's number may fall short of the server's before it is called impossible.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Contradiction {
    /// Which bound.
    pub check: Check,
    /// The client's number: ms (`ttft`, `decode`: time to the first or last token), or
    /// token-carrying events (`tokens`).
    pub client: f64,
    /// The server's own number: ms (`prompt_ms`, `prompt_ms + predicted_ms`) or tokens.
    pub server: f64,
    /// How far below `server` the client's number may fall before it is impossible (same
    /// unit; 0 for `tokens`).
    pub tolerance: f64,
}

/// Why a sample's timings cannot be true (with the `impossible_timing` flag).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Impossible {
    /// Every bound the sample broke, with both numbers.
    pub checks: Vec<Contradiction>,
    /// The event the client took for the first token, as the server sent it (its first 300
    /// characters): what the report names when this is a run's norm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_event: Option<String>,
}

impl Impossible {
    /// The broken bound of kind `check`, if any.
    pub fn get(&self, check: &Check) -> Option<&Contradiction> {
        self.checks.iter().find(|c| c.check == *check)
    }
}
