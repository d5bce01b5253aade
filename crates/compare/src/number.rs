//! How the report writes a measured number.

/// A measured value for a table: `–` if not finite, no decimals from 1000, one from 10, three
/// below.
pub fn fmt(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}
