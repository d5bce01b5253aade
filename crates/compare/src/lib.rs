//! # mobius-compare: the papers' experiments, side by side
//!
//! `mobius compare` runs each experiment on every design it applies to, with the same seeds, and
//! writes `report.md` (tables, and beside every figure the paper's claim with our measured number),
//! one SVG per figure and `results.json`. Every number in the report is measured in that run.

pub mod svg;
