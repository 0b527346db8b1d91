//! Which format a trace file is in.

use std::path::Path;

use crate::request::{TraceError, TraceFormat};

/// Detects the format of the trace at `path` (a file, or for Weka a folder of files).
pub fn detect(path: &Path) -> Result<TraceFormat, TraceError> {
    Err(TraceError::UnknownFormat {
        path: path.to_owned(),
        reason: "trace reading is not built yet".into(),
    })
}
