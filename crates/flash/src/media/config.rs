//! The media model's parameters and the parts it ships with (docs/reliability.md).
//!
//! Raw bit error rate per page (RBER) is the power law of wear, retention and read disturb that
//! SimpleSSD 2.0 fits for a 2y-nm MLC part (SimpleSSD `ftl/read_reclaim/abstract_read_reclaim.cc`,
//! Gouk et al., MICRO 2018): `ε + α·N^k + β·N^m·t^n + γ·N^p·r^q` with `N` the block's P/E cycles,
//! `t` the page's retention age in days and `r` the reads of its block since its erase. The SLC-
//! and TLC-like parts are that curve with P/E cycles taken relative to the part's rated endurance
//! ([R], docs/reliability.md). ECC corrects up to 24 bits per 1 KB codeword by default, the
//! Jasmine OpenSSD platform's BCH (Möbius Table II).

use crate::error::ConfigError;
use serde::{Deserialize, Serialize};

/// The part names `--media` accepts.
pub const PART_NAMES: [&str; 3] = ["slc", "mlc", "tlc"];

/// The RBER power law: `ε + α·N^k` (wear) `+ β·N^m·t^n` (retention, `t` in days) `+ γ·N^p·r^q`
/// (read disturb, `r` reads of the block since its erase).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RberModel {
    pub epsilon: f64,
    pub alpha: f64,
    pub k: f64,
    pub beta: f64,
    pub m: f64,
    pub n: f64,
    pub gamma: f64,
    pub p: f64,
    pub q: f64,
}

/// The two parts of a page's RBER: what a shifted read threshold cannot undo (the erased
/// state and the wear that widens every distribution), and the shift of the distributions by
/// charge loss and read disturb, which read retry tracks (Cai et al., HPCA 2015).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rber {
    pub fixed: f64,
    pub shift: f64,
}

impl Rber {
    /// The rate after `retries` re-reads with shifted thresholds, each of which removes
    /// `gain` of the shift errors left.
    pub fn after_retries(&self, retries: u32, gain: f64) -> f64 {
        self.fixed + self.shift * (1.0 - gain).powi(retries as i32)
    }
}

impl RberModel {
    /// 2y-nm MLC (SimpleSSD 2.0, `abstract_read_reclaim.cc`).
    pub const MLC_2Y: RberModel = RberModel {
        epsilon: 8.34e-5,
        alpha: 3.30e-11,
        k: 1.71,
        beta: 5.56e-19,
        m: 2.49,
        n: 3.33,
        gamma: 6.26e-13,
        p: 1.76,
        q: 0.47,
    };

    /// The rate of a page in a block of `pe` P/E cycles, `days` after its program, after `reads`
    /// reads of its block since the erase.
    pub fn rber(&self, pe: f64, days: f64, reads: f64) -> Rber {
        let pe = pe.max(0.0);
        let wear = self.alpha * pe.powf(self.k);
        let retention = self.beta * pe.powf(self.m) * days.max(0.0).powf(self.n);
        let disturb = self.gamma * pe.powf(self.p) * reads.max(0.0).powf(self.q);
        Rber {
            fixed: self.epsilon + wear,
            shift: retention + disturb,
        }
    }

    /// The same curve for a part rated for `endurance` cycles, where the MLC part is rated
    /// for [`MLC_ENDURANCE`]: `N` is taken relative to the rated endurance.
    fn rescaled(&self, endurance: u32) -> RberModel {
        let s = MLC_ENDURANCE as f64 / endurance as f64;
        RberModel {
            alpha: self.alpha * s.powf(self.k),
            beta: self.beta * s.powf(self.m),
            gamma: self.gamma * s.powf(self.p),
            ..self.clone()
        }
    }
}

/// Rated P/E cycles of the MLC part the constants were fitted to (2y-nm MLC, [R]).
pub const MLC_ENDURANCE: u32 = 3_000;

/// The error-correcting code: `correctable_bits` per codeword of `codeword_bytes` of data; the
/// spare area is one codeword of its own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ecc {
    pub codeword_bytes: u32,
    pub correctable_bits: u32,
}

/// Everything the media model needs; `DeviceConfig::media` holds it when the model is on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MediaConfig {
    /// The part the parameters started from (`slc`, `mlc`, `tlc`).
    pub part: String,
    /// Every draw of the model (bit errors, failures, factory bad blocks) derives from it.
    pub seed: u64,
    /// Rated P/E cycles of the part.
    pub endurance: u32,
    /// P/E cycles every block had before this run (the wear-out level).
    pub initial_pe: u32,
    /// Seconds the device lies powered off after a power cut before it is powered on again:
    /// retention age every page gains then.
    pub power_off_s: u64,
    pub rber: RberModel,
    pub ecc: Ecc,
    /// Re-reads with shifted thresholds before a read is uncorrectable.
    pub max_retries: u32,
    /// Share of the shift errors left that each retry removes.
    pub retry_gain: f64,
    /// A read needing this many retries queues its block for read reclaim.
    pub reclaim_after_retries: u32,
    /// Physical blocks per chip beyond the geometry's, for bad-block replacement.
    pub spare_blocks_per_chip: u32,
    /// Share of blocks bad from the factory (at most half the spares per chip).
    pub factory_bad_fraction: f64,
    /// Share of blocks that fail a program or erase by the rated endurance.
    pub grown_bad_at_endurance: f64,
    /// The failure rate grows as (P/E cycles / endurance)^shape.
    pub grown_bad_shape: f64,
    /// Share of grown bad blocks found by a failed program (the rest by a failed erase).
    pub program_fail_share: f64,
    /// Negative control: the controller hands data that failed ECC to the design, its bits
    /// flipped, instead of reporting the read uncorrectable. Never set outside the checker's
    /// controls.
    #[serde(default)]
    pub hand_uncorrectable: bool,
}

impl MediaConfig {
    /// A part by name: `slc` (rated 100,000 cycles), `mlc` (3,000) or `tlc` (1,000); the
    /// device's geometry sets the default spare blocks.
    pub fn part(name: &str, blocks_per_chip: u32) -> Result<MediaConfig, ConfigError> {
        let (endurance, max_retries) = match name {
            "slc" => (100_000, 2),
            "mlc" => (MLC_ENDURANCE, 5),
            "tlc" => (1_000, 8),
            other => {
                return Err(ConfigError::UnknownPart {
                    name: other.to_string(),
                    known: PART_NAMES.join(", "),
                })
            }
        };
        Ok(MediaConfig {
            part: name.to_string(),
            seed: 0,
            endurance,
            initial_pe: 0,
            power_off_s: 0,
            rber: RberModel::MLC_2Y.rescaled(endurance),
            ecc: Ecc {
                codeword_bytes: 1024,
                correctable_bits: 24,
            },
            max_retries,
            retry_gain: 0.5,
            reclaim_after_retries: 1,
            spare_blocks_per_chip: (blocks_per_chip * 4).div_ceil(100).max(4),
            factory_bad_fraction: 0.01,
            grown_bad_at_endurance: 0.02,
            grown_bad_shape: 3.0,
            program_fail_share: 0.5,
            hand_uncorrectable: false,
        })
    }

    /// `wear` times the rated endurance as the cycles every block had before the run.
    pub fn with_wear(mut self, wear: f64) -> MediaConfig {
        self.initial_pe = (wear.max(0.0) * self.endurance as f64).round() as u32;
        self
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |what: &str| Err(ConfigError::Invalid(format!("media.{what}")));
        if self.endurance == 0 {
            return bad("endurance must be at least 1");
        }
        if self.ecc.codeword_bytes == 0 {
            return bad("ecc.codeword_bytes must be at least 1");
        }
        if !(0.0..=1.0).contains(&self.retry_gain) {
            return bad("retry_gain must be in [0, 1]");
        }
        for (name, v) in [
            ("factory_bad_fraction", self.factory_bad_fraction),
            ("grown_bad_at_endurance", self.grown_bad_at_endurance),
            ("program_fail_share", self.program_fail_share),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return bad(&format!("{name} must be in [0, 1]"));
            }
        }
        if self.spare_blocks_per_chip == 0 {
            return bad("spare_blocks_per_chip must be at least 1");
        }
        if self.grown_bad_shape.is_nan() || self.grown_bad_shape < 0.0 {
            return bad("grown_bad_shape must be at least 0");
        }
        Ok(())
    }

    /// Probability that one erase of a block of `pe` cycles fails, and that one program of a
    /// page of it fails (`pages_per_block` programs per cycle): the grown-bad share by the rated
    /// endurance spread over the cycles as a hazard growing with (pe / endurance)^shape.
    pub fn fail_probabilities(&self, pe: f64, pages_per_block: u32) -> (f64, f64) {
        let e = self.endurance as f64;
        let s = self.grown_bad_shape;
        let per_cycle = self.grown_bad_at_endurance * (s + 1.0) / e * (pe.max(0.0) / e).powf(s);
        let erase = (per_cycle * (1.0 - self.program_fail_share)).min(1.0);
        let program = (per_cycle * self.program_fail_share / pages_per_block as f64).min(1.0);
        (erase, program)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The MLC constants give the curve SimpleSSD's comment describes: a fresh page at the
    /// rated endurance well inside 24 bits per KB, a page left 200 days far outside it, and
    /// read disturb growing with reads.
    #[test]
    fn the_mlc_curve_has_its_published_shape() {
        let m = RberModel::MLC_2Y;
        let fresh = m.rber(3000.0, 0.0, 0.0);
        assert!((fresh.fixed - 1.13e-4).abs() < 0.01e-4, "{fresh:?}");
        assert_eq!(fresh.shift, 0.0);
        let bits = 8192.0;
        assert!(bits * fresh.fixed < 1.0, "under one error per codeword");
        let old = m.rber(3000.0, 200.0, 0.0);
        assert!(bits * (old.fixed + old.shift) > 24.0 * 3.0, "{old:?}");
        let read = |r: f64| m.rber(3000.0, 0.0, r).shift;
        assert!(read(1e5) > read(1e3) && read(1e3) > 0.0);
    }

    /// A part rated for E cycles at E cycles errs as the MLC part at 3,000; retries remove
    /// shift errors only.
    #[test]
    fn parts_are_the_mlc_curve_at_their_rated_endurance() {
        let mlc = RberModel::MLC_2Y.rber(3000.0, 90.0, 1000.0);
        for (name, e) in [("slc", 100_000.0), ("tlc", 1000.0)] {
            let part = MediaConfig::part(name, 32).unwrap();
            let r = part.rber.rber(e, 90.0, 1000.0);
            assert!((r.fixed - mlc.fixed).abs() / mlc.fixed < 1e-9, "{name}");
            assert!((r.shift - mlc.shift).abs() / mlc.shift < 1e-9, "{name}");
        }
        let r = Rber {
            fixed: 1e-4,
            shift: 8e-4,
        };
        assert!((r.after_retries(0, 0.5) - 9e-4).abs() < 1e-15);
        assert!((r.after_retries(3, 0.5) - 2e-4).abs() < 1e-15);
        assert!(MediaConfig::part("qlc", 32).is_err());
    }

    /// The grown-bad hazard integrates to the configured share by the rated endurance.
    #[test]
    fn grown_bad_blocks_reach_their_share_at_endurance() {
        let c = MediaConfig::part("mlc", 32).unwrap();
        let ppb = 64;
        let total: f64 = (0..c.endurance)
            .map(|n| {
                let (erase, program) = c.fail_probabilities(n as f64, ppb);
                erase + program * ppb as f64
            })
            .sum();
        assert!((total - c.grown_bad_at_endurance).abs() < 0.001, "{total}");
        let (e0, p0) = c.fail_probabilities(0.0, ppb);
        assert_eq!((e0, p0), (0.0, 0.0));
    }

    #[test]
    fn bad_parameters_are_refused() {
        let mut c = MediaConfig::part("mlc", 32).unwrap();
        c.validate().unwrap();
        c.retry_gain = 1.5;
        assert!(c.validate().is_err());
        let mut c = MediaConfig::part("tlc", 32).unwrap();
        c.spare_blocks_per_chip = 0;
        assert!(c.validate().is_err());
        assert_eq!(
            MediaConfig::part("mlc", 32)
                .unwrap()
                .with_wear(1.5)
                .initial_pe,
            4500
        );
    }
}
