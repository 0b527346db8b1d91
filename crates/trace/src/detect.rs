//! Which format a trace is in, and opening it in that format.

use std::io::Read as _;
use std::path::Path;

use crate::reader::{Source, TraceReader};
use crate::request::{TraceError, TraceFormat};
use crate::{azure, mooncake, own, tracelab, weka};

/// Bytes read from the start of a file to tell its format.
const SNIFF_BYTES: u64 = 1 << 20;

/// Detects the format of the trace at `path` (a file, or for Weka a folder of files), from
/// its first line's fields (or the CSV header).
pub fn detect(path: &Path) -> Result<TraceFormat, TraceError> {
    let unknown = |reason: String| TraceError::UnknownFormat {
        path: path.to_owned(),
        reason,
    };
    if path.is_dir() {
        return Ok(TraceFormat::Weka);
    }
    let file = std::fs::File::open(path).map_err(|source| TraceError::Io {
        path: path.to_owned(),
        source,
    })?;
    let mut head = Vec::new();
    file.take(SNIFF_BYTES)
        .read_to_end(&mut head)
        .map_err(|source| TraceError::Io {
            path: path.to_owned(),
            source,
        })?;
    let text = String::from_utf8_lossy(&head);
    let text = text.trim_start_matches('\u{feff}').trim_start();
    if text.is_empty() {
        return Err(unknown("the file is empty".into()));
    }
    let first = text.lines().next().unwrap_or("").trim();
    if first.starts_with("TIMESTAMP,") || first.eq_ignore_ascii_case(azure::HEADER) {
        return Ok(TraceFormat::AzureCsv);
    }
    if !first.starts_with('{') {
        return Err(unknown(format!(
            "the first line is neither JSON nor the Azure CSV header `{}`",
            azure::HEADER
        )));
    }
    // A Weka file is one object, possibly larger than the sniffed bytes: its top-level keys
    // come before its requests.
    let keys_seen = |k: &str| text.contains(&format!("\"{k}\""));
    if keys_seen("block_size") || keys_seen("hash_id_scope") {
        return Ok(TraceFormat::Weka);
    }
    let obj = match serde_json::from_str::<serde_json::Value>(first) {
        Ok(serde_json::Value::Object(o)) => o,
        Ok(_) => return Err(unknown("the first line is JSON but not an object".into())),
        Err(e) => return Err(unknown(format!("the first line is not valid JSON ({e})"))),
    };
    let has = |k: &str| obj.contains_key(k);
    if has("requests") {
        Ok(TraceFormat::Weka)
    } else if has("input_tokens_total") || has("round_index") {
        Ok(TraceFormat::TraceLab)
    } else if has("input_length") {
        Ok(TraceFormat::Mooncake)
    } else if has("input_tokens") {
        Ok(TraceFormat::Ctxbench)
    } else {
        let mut keys: Vec<&str> = obj.keys().map(String::as_str).take(8).collect();
        keys.sort_unstable();
        Err(unknown(format!(
            "first line's fields {keys:?} match none of Mooncake (input_length), Weka (block_size, requests), TraceLab (input_tokens_total), ctxbench (input_tokens)"
        )))
    }
}

/// Opens the trace at `path` (a file, or a folder of Weka files) in the format detected.
pub fn open(path: &Path) -> Result<TraceReader, TraceError> {
    let format = detect(path)?;
    open_as(path, format)
}

/// Opens the trace at `path` as `format`.
pub fn open_as(path: &Path, format: TraceFormat) -> Result<TraceReader, TraceError> {
    let source: Box<dyn Source> = match format {
        TraceFormat::Mooncake => Box::new(mooncake::MooncakeSource::open(path)?),
        TraceFormat::Weka => Box::new(weka::WekaSource::open(path)?),
        TraceFormat::TraceLab => Box::new(tracelab::TraceLabSource::open(path)?),
        TraceFormat::AzureCsv => Box::new(azure::AzureSource::open(path)?),
        TraceFormat::Ctxbench => Box::new(own::OwnSource::open(path)?),
    };
    Ok(TraceReader::new(Some(format), source))
}
