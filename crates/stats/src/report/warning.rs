//! A report's warnings: a short machine-readable kind and what to do.

use serde::Serialize;

/// A warning, with a short machine-readable kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Warning {
    /// `contaminated`, `length_mismatch`, `failed`, `cache_unverified`, `two_point_inverted`,
    /// `cache_bypass_off`, `nonce_off`, `poor_fit`, `no_fit`, `extrapolation`, `torn_line`,
    /// `synthetic_corpus`, `other_phase`, `prediction_missed`, `shared_server`,
    /// `idle_unchecked`, `held_back_stream`, `impossible_timing`, `roofline_impossible`, `router`,
    /// `wrapped_corpus`, `acceptance_cliff`, `acceptance_cliff_position`.
    pub kind: &'static str,
    /// What happened and what to do.
    pub message: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A warning of `kind` saying `message`.
pub fn warn(kind: &'static str, message: String) -> Warning {
    Warning { kind, message }
}
