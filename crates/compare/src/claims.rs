//! Claims that can fail: each paper claim is a set of sub-claims, each one a measured number, a
//! tolerance taken from the paper, and a verdict.
//!
//! A sub-claim is graded only from the number this run measured: `PASS` when the number lies
//! inside the tolerance, `FAIL` when it lies outside, `NOT-REPRODUCED` when this run could not
//! measure it (the design was not built, the experiment has no model of the effect) — always
//! with the reason. A check that is true by construction is not graded: it is shown with
//! [`Check::by_construction`] and says why.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The range a measured number must fall in to agree with the paper.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Tolerance {
    /// `measured >= min`.
    AtLeast { min: f64 },
    /// `measured <= max`.
    AtMost { max: f64 },
    /// `measured < bound` (strictly).
    Below { bound: f64 },
    /// `measured > bound` (strictly).
    Above { bound: f64 },
    /// `min <= measured <= max`.
    Between { min: f64, max: f64 },
    /// `|measured / target - 1| <= rel`.
    Within { target: f64, rel: f64 },
}

impl Tolerance {
    /// Whether `v` satisfies the tolerance (`v` finite).
    pub fn holds(self, v: f64) -> bool {
        match self {
            Tolerance::AtLeast { min } => v >= min,
            Tolerance::AtMost { max } => v <= max,
            Tolerance::Below { bound } => v < bound,
            Tolerance::Above { bound } => v > bound,
            Tolerance::Between { min, max } => (min..=max).contains(&v),
            Tolerance::Within { target, rel } => (v / target - 1.0).abs() <= rel,
        }
    }
}

impl fmt::Display for Tolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = crate::number::fmt;
        match *self {
            Tolerance::AtLeast { min } => write!(f, "≥ {}", g(min)),
            Tolerance::AtMost { max } => write!(f, "≤ {}", g(max)),
            Tolerance::Below { bound } => write!(f, "< {}", g(bound)),
            Tolerance::Above { bound } => write!(f, "> {}", g(bound)),
            Tolerance::Between { min, max } => write!(f, "{} … {}", g(min), g(max)),
            Tolerance::Within { target, rel } => {
                write!(f, "{} ± {:.0} %", g(target), rel * 100.0)
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    #[serde(rename = "PASS")]
    Pass,
    #[serde(rename = "FAIL")]
    Fail,
    /// This run did not measure it, or we do not model what it depends on (the reason is given).
    #[serde(rename = "NOT-REPRODUCED")]
    NotReproduced,
    /// Shown but not graded: it follows from how the experiment is built, not from the designs.
    #[serde(rename = "BY-CONSTRUCTION")]
    ByConstruction,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "**FAIL**",
            Verdict::NotReproduced => "NOT-REPRODUCED",
            Verdict::ByConstruction => "by construction",
        }
    }
}

/// One graded sub-claim.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// What is asserted, with the measured quantity named ("A-SWRITE TPS / Atomic-Write TPS").
    pub claim: String,
    /// The measured number (`None` when not measured).
    pub measured: Option<f64>,
    pub tolerance: Option<Tolerance>,
    pub verdict: Verdict,
    /// Why it is not reproduced or not graded; empty for PASS/FAIL.
    pub why: String,
}

impl Check {
    /// Grades `measured` against `tolerance`; a non-finite number is NOT-REPRODUCED.
    pub fn grade(claim: impl Into<String>, measured: f64, tolerance: Tolerance) -> Check {
        let claim = claim.into();
        if !measured.is_finite() {
            return Check::not_reproduced(claim, "not measured in this run");
        }
        let verdict = if tolerance.holds(measured) {
            Verdict::Pass
        } else {
            Verdict::Fail
        };
        Check {
            claim,
            measured: Some(measured),
            tolerance: Some(tolerance),
            verdict,
            why: String::new(),
        }
    }

    /// Grades an optional measurement (`None`: NOT-REPRODUCED with `why_missing`).
    pub fn grade_opt(
        claim: impl Into<String>,
        measured: Option<f64>,
        tolerance: Tolerance,
        why_missing: &str,
    ) -> Check {
        match measured {
            Some(v) => Check::grade(claim, v, tolerance),
            None => Check::not_reproduced(claim, why_missing),
        }
    }

    pub fn not_reproduced(claim: impl Into<String>, why: impl Into<String>) -> Check {
        Check {
            claim: claim.into(),
            measured: None,
            tolerance: None,
            verdict: Verdict::NotReproduced,
            why: why.into(),
        }
    }

    /// A number shown beside the claim but not graded, because it cannot come out otherwise.
    pub fn by_construction(
        claim: impl Into<String>,
        measured: f64,
        why: impl Into<String>,
    ) -> Check {
        Check {
            claim: claim.into(),
            measured: measured.is_finite().then_some(measured),
            tolerance: None,
            verdict: Verdict::ByConstruction,
            why: why.into(),
        }
    }
}

/// A paper's claim: where it is, what it says, and its graded sub-claims.
#[derive(Clone, Debug, Serialize)]
pub struct Claim {
    /// Where the paper says it ("Möbius §V-B, Fig. 7").
    pub source: String,
    /// The paper's claim, quoted as the paper's.
    pub paper: String,
    pub checks: Vec<Check>,
    /// Why we believe we differ, where we do (model difference, paper ambiguity, bug).
    pub note: String,
}

impl Claim {
    pub fn new(source: impl Into<String>, paper: impl Into<String>) -> Claim {
        Claim {
            source: source.into(),
            paper: paper.into(),
            checks: Vec::new(),
            note: String::new(),
        }
    }

    pub fn check(mut self, c: Check) -> Claim {
        self.checks.push(c);
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Claim {
        self.note = note.into();
        self
    }

    /// FAIL if any graded check fails; PASS if every graded check passes; NOT-REPRODUCED when
    /// none could be graded.
    pub fn verdict(&self) -> Verdict {
        let graded: Vec<Verdict> = self
            .checks
            .iter()
            .map(|c| c.verdict)
            .filter(|v| *v != Verdict::ByConstruction)
            .collect();
        if graded.contains(&Verdict::Fail) {
            Verdict::Fail
        } else if graded.contains(&Verdict::Pass) && !graded.contains(&Verdict::NotReproduced) {
            Verdict::Pass
        } else if graded.is_empty() && !self.checks.is_empty() {
            Verdict::ByConstruction
        } else {
            Verdict::NotReproduced
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerances_hold_and_fail_at_their_edges() {
        assert!(Tolerance::AtLeast { min: 1.3 }.holds(1.3));
        assert!(!Tolerance::AtLeast { min: 1.3 }.holds(1.29));
        assert!(Tolerance::AtMost { max: 2.0 }.holds(2.0));
        assert!(!Tolerance::AtMost { max: 2.0 }.holds(2.01));
        assert!(!Tolerance::Below { bound: 1.0 }.holds(1.0));
        assert!(!Tolerance::Above { bound: 1.0 }.holds(1.0));
        assert!(Tolerance::Above { bound: 1.0 }.holds(1.01));
        assert_eq!(Tolerance::Above { bound: 1.0 }.to_string(), "> 1.000");
        assert!(Tolerance::Between { min: 0.8, max: 1.0 }.holds(0.9));
        assert!(!Tolerance::Between { min: 0.8, max: 1.0 }.holds(1.01));
        assert!(Tolerance::Within {
            target: 1.0,
            rel: 0.15
        }
        .holds(0.86));
        assert!(!Tolerance::Within {
            target: 1.0,
            rel: 0.15
        }
        .holds(1.16));
    }

    #[test]
    fn a_value_outside_the_tolerance_fails_and_a_missing_one_is_not_reproduced() {
        assert_eq!(
            Check::grade("x", 0.5, Tolerance::AtLeast { min: 1.0 }).verdict,
            Verdict::Fail
        );
        assert_eq!(
            Check::grade("x", 1.5, Tolerance::AtLeast { min: 1.0 }).verdict,
            Verdict::Pass
        );
        assert_eq!(
            Check::grade("x", f64::NAN, Tolerance::AtLeast { min: 1.0 }).verdict,
            Verdict::NotReproduced
        );
    }

    #[test]
    fn one_failing_check_fails_the_claim() {
        let c = Claim::new("s", "p")
            .check(Check::grade("a", 2.0, Tolerance::AtLeast { min: 1.0 }))
            .check(Check::grade("b", 2.0, Tolerance::AtMost { max: 1.0 }));
        assert_eq!(c.verdict(), Verdict::Fail);
        let c = Claim::new("s", "p")
            .check(Check::grade("a", 2.0, Tolerance::AtLeast { min: 1.0 }))
            .check(Check::by_construction("b", 1.0, "structural"));
        assert_eq!(c.verdict(), Verdict::Pass);
        let c = Claim::new("s", "p").check(Check::not_reproduced("a", "no model"));
        assert_eq!(c.verdict(), Verdict::NotReproduced);
    }
}
