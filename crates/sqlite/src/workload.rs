//! SQL workloads
