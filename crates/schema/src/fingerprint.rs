//! Output fingerprints: which greedy outputs are identical, within a run and between runs.
//!
//! The hash is FNV-1a 64-bit over a fixed byte encoding (token ids as little-endian u32,
//! or the text's UTF-8 bytes). It is written out here rather than taken from
//! `std::hash`, whose algorithm may change between Rust releases: a fingerprint must mean
//! the same thing in a results file written years apart. It guards against accidental
//! equality, not against an adversary.

use crate::record::FingerprintOf;

/// The generated output of one request, for output agreement and needle checks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Generated {
    /// Generated token ids in order, when the stream carries them (llama.cpp `tokens`).
    pub ids: Option<Vec<u32>>,
    /// Generated text, concatenated from the stream.
    pub text: String,
}

impl Generated {
    /// Appends one event's ids.
    pub fn push_ids(&mut self, ids: impl IntoIterator<Item = u32>) {
        self.ids.get_or_insert_with(Vec::new).extend(ids);
    }
}

/// How many leading generated ids a sample keeps (enough to locate an early divergence).
pub const KEPT_IDS: usize = 32;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 of `bytes`.
pub fn fnv1a64(bytes: impl IntoIterator<Item = u8>) -> u64 {
    fnv1a64_from(FNV_OFFSET, bytes)
}

/// FNV-1a 64 continued from `h` (a hash so far) over more `bytes`: the hash of a text fed
/// piece by piece equals [`fnv1a64`] of the whole.
pub fn fnv1a64_from(h: u64, bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes
        .into_iter()
        .fold(h, |h, b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
}

/// The fingerprint of an output, what it hashes, and its first ids; `None` when nothing
/// was generated.
pub fn of(out: &Generated) -> Option<(String, FingerprintOf, Option<Vec<u32>>)> {
    match &out.ids {
        Some(ids) if !ids.is_empty() => {
            let h = fnv1a64(ids.iter().flat_map(|t| t.to_le_bytes()));
            let kept = ids.iter().take(KEPT_IDS).copied().collect();
            Some((
                format!("fnv1a64:{h:016x}"),
                FingerprintOf::TokenIds,
                Some(kept),
            ))
        }
        _ if !out.text.is_empty() => {
            let h = fnv1a64(out.text.bytes());
            Some((format!("fnv1a64:{h:016x}"), FingerprintOf::Text, None))
        }
        _ => None,
    }
}

/// Where two outputs first differ, as far as the kept ids show: `Some(i)` for the first
/// differing index, `None` when the kept ids agree (the difference is later, or unknown).
pub fn first_divergence(a: &[u32], b: &[u32]) -> Option<usize> {
    let common = a.iter().zip(b).position(|(x, y)| x != y);
    common.or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_the_published_test_vectors() {
        // From the FNV reference (draft-eastlake-fnv): "" and "a".
        assert_eq!(fnv1a64(*b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(*b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(*b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn ids_beat_text_and_nothing_gives_none() {
        let ids = Generated {
            ids: Some((0..40).collect()),
            text: "x".into(),
        };
        let (f, of_, kept) = of(&ids).unwrap();
        assert!(f.starts_with("fnv1a64:") && f.len() == 24);
        assert_eq!(of_, FingerprintOf::TokenIds);
        assert_eq!(kept.unwrap().len(), KEPT_IDS);
        let text = Generated {
            ids: None,
            text: "hello".into(),
        };
        assert_eq!(of(&text).unwrap().1, FingerprintOf::Text);
        assert!(of(&Generated::default()).is_none());
        // One id changed: another fingerprint.
        let mut other = ids.clone();
        other.ids.as_mut().unwrap()[39] = 7;
        assert_ne!(of(&other).unwrap().0, f);
    }

    #[test]
    fn divergence_is_the_first_differing_index() {
        assert_eq!(first_divergence(&[1, 2, 3], &[1, 2, 4]), Some(2));
        assert_eq!(first_divergence(&[1, 2, 3], &[1, 2, 3]), None);
        assert_eq!(first_divergence(&[1, 2], &[1, 2, 3]), Some(2));
    }
}
