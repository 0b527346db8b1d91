//! ctxbench's writers: the report and the comparison as a terminal table, Markdown, HTML,
//! CSV, JSON and SVG plots. Built from the report model alone (no async, no HTTP).

#![warn(missing_docs)]

// The layers below, under the names the code has always used.
pub(crate) use ctxbench_schema::{model, record, units, warm};
pub(crate) use ctxbench_stats::{capacity, compare, integrity, price, report, roofline, stats};

pub mod render;
