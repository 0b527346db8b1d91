//! The accelerators `--hardware` knows: memory bandwidth and dense BF16 peak, as their
//! vendors' data sheets state them (each source is named in docs/roofline.md). Where a name
//! covers variants (an H100 in SXM or PCIe form), the faster one's figures are taken: a
//! higher limit makes the bound lower, so a figure can come out too modest, never
//! impossible.

/// One accelerator's limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Accelerator {
    /// The name `--hardware` takes.
    pub name: &'static str,
    /// Other names it answers to.
    pub aliases: &'static [&'static str],
    /// What it is, for reports.
    pub label: &'static str,
    /// Peak memory bandwidth, GB/s (10⁹ bytes per second).
    pub memory_bandwidth_gb_s: f64,
    /// Dense (no structured sparsity) BF16 tensor peak, TFLOPs.
    pub bf16_dense_tflops: f64,
}

/// The table, in the order `--hardware`'s error lists it.
pub const ACCELERATORS: &[Accelerator] = &[
    Accelerator {
        name: "h100-sxm",
        aliases: &["h100"],
        label: "NVIDIA H100 SXM5 80GB",
        memory_bandwidth_gb_s: 3350.0,
        bf16_dense_tflops: 989.4,
    },
    Accelerator {
        name: "h200",
        aliases: &["h200-sxm"],
        label: "NVIDIA H200 SXM 141GB",
        memory_bandwidth_gb_s: 4800.0,
        bf16_dense_tflops: 989.4,
    },
    Accelerator {
        name: "b200",
        aliases: &[],
        label: "NVIDIA B200 (HGX B200)",
        memory_bandwidth_gb_s: 8000.0,
        bf16_dense_tflops: 2250.0,
    },
    Accelerator {
        name: "a100-80gb",
        aliases: &["a100", "a100-sxm"],
        label: "NVIDIA A100 80GB SXM",
        memory_bandwidth_gb_s: 2039.0,
        bf16_dense_tflops: 312.0,
    },
    Accelerator {
        name: "l40s",
        aliases: &[],
        label: "NVIDIA L40S",
        memory_bandwidth_gb_s: 864.0,
        bf16_dense_tflops: 362.05,
    },
    Accelerator {
        name: "mi300x",
        aliases: &[],
        label: "AMD Instinct MI300X",
        memory_bandwidth_gb_s: 5300.0,
        bf16_dense_tflops: 1307.4,
    },
];

/// A `--hardware` name the table does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--hardware {given}: not a known accelerator; known: {known} (for anything else, give --memory-bandwidth GB/s and --peak-tflops N)")]
pub struct UnknownHardware {
    /// The name given.
    pub given: String,
    /// The names the table has.
    pub known: String,
}

/// Lowercase, without spaces, dashes or underscores: `H100 SXM` and `h100_sxm` are one.
fn key(s: &str) -> String {
    s.chars()
        .filter(|c| !matches!(c, ' ' | '-' | '_'))
        .flat_map(char::to_lowercase)
        .collect()
}

/// The accelerator `name` names (case, spaces and dashes aside).
pub fn find(name: &str) -> Result<&'static Accelerator, UnknownHardware> {
    let k = key(name);
    ACCELERATORS
        .iter()
        .find(|a| key(a.name) == k || a.aliases.iter().any(|x| key(x) == k))
        .ok_or_else(|| UnknownHardware {
            given: name.to_owned(),
            known: ACCELERATORS
                .iter()
                .map(|a| a.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found_however_they_are_written_and_unknown_ones_list_the_table() {
        assert_eq!(find("H100 SXM").unwrap().memory_bandwidth_gb_s, 3350.0);
        assert_eq!(find("h100").unwrap().name, "h100-sxm");
        assert_eq!(find("MI300X").unwrap().bf16_dense_tflops, 1307.4);
        assert_eq!(find("a100_80gb").unwrap().memory_bandwidth_gb_s, 2039.0);
        let e = find("tpu-v5").unwrap_err();
        let msg = e.to_string();
        for a in ACCELERATORS {
            assert!(msg.contains(a.name), "{msg}");
        }
        assert!(
            msg.contains("tpu-v5") && msg.contains("--memory-bandwidth"),
            "{msg}"
        );
    }
}
