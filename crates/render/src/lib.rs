//! ctxbench's writers: the report and the comparison as a terminal table, Markdown, HTML,
//! CSV, JSON and SVG plots. Built from the report model alone (no async, no HTTP).

#![warn(missing_docs)]

pub mod render;

#[cfg(test)]
mod snapshot_tests;
