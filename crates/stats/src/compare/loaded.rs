//! A run as `compare` reads it.

use ctxbench_schema::record::Results;

/// One results file as loaded: (label, path, results).
pub type Loaded = (String, String, Results);
