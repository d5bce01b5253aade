//! Bit errors drawn per codeword, the ECC's verdict, and read retry.
//!
//! Every draw is a function of the model's seed and of where and what it is drawn for (the
//! physical page, its erase generation, the codeword, the retry step): no random stream whose
//! order could differ between a run and its replay. For a given draw the error count grows with
//! the rate, so a page's errors only grow as it ages and its block is read: a page found
//! uncorrectable stays so until its block is erased.

use super::config::{MediaConfig, Rber};

/// 64 bits from `seed` and `parts` (SplitMix64's finaliser over each word in turn).
pub fn mix(seed: u64, parts: &[u64]) -> u64 {
    let mut h = seed ^ 0x9E37_79B9_7F4A_7C15;
    for &p in parts {
        h ^= p.wrapping_add(0x9E37_79B9_7F4A_7C15).wrapping_add(h << 6);
        h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        h ^= h >> 31;
    }
    h
}

/// A uniform draw in (0, 1) from 64 bits.
pub fn uniform(h: u64) -> f64 {
    ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// The Poisson(λ) count at quantile `u`, or `limit + 1` if it exceeds `limit`: the raw bit
/// errors of a codeword of many bits, each wrong with a small probability.
pub fn poisson_errors(lambda: f64, u: f64, limit: u32) -> u32 {
    if lambda <= 0.0 {
        return 0;
    }
    let ln_lambda = lambda.ln();
    let mut ln_term = -lambda;
    let mut cdf = 0.0;
    for x in 0..=limit {
        if x > 0 {
            ln_term += ln_lambda - (x as f64).ln();
        }
        cdf += ln_term.exp();
        if u <= cdf {
            return x;
        }
    }
    limit + 1
}

/// What the ECC made of one page read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// Re-reads with shifted thresholds it took (`max_retries` when it failed).
    pub retries: u32,
    /// Every codeword decoded.
    pub corrected: bool,
    /// Bit errors corrected in the read that decoded (0 when none did).
    pub bit_errors: u32,
}

/// Which codewords of a page a read decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codewords {
    /// The data area and the spare area (a page read).
    Page,
    /// The spare area only (a read of the OOB record).
    Spare,
}

/// Decodes a page of `page_bytes` data and `oob_bytes` spare at rate `rate`, retrying with
/// shifted thresholds; `draw(codeword, step)` is the uniform draw of one codeword at one step
/// (the spare area is codeword `data codewords`).
pub fn decode(
    config: &MediaConfig,
    rate: Rber,
    page_bytes: u32,
    oob_bytes: u32,
    which: Codewords,
    draw: impl Fn(u32, u32) -> f64,
) -> Decoded {
    let cw_bytes = config.ecc.codeword_bytes;
    let data_cws = page_bytes.div_ceil(cw_bytes);
    let limit = config.ecc.correctable_bits;
    let codewords: Vec<(u32, f64)> = match which {
        Codewords::Page => (0..data_cws)
            .map(|c| (c, (cw_bytes.min(page_bytes) * 8) as f64))
            .chain(std::iter::once((data_cws, (oob_bytes * 8) as f64)))
            .collect(),
        Codewords::Spare => vec![(data_cws, (oob_bytes * 8) as f64)],
    };
    for step in 0..=config.max_retries {
        let r = rate.after_retries(step, config.retry_gain);
        let mut bit_errors = 0;
        let mut ok = true;
        for &(c, bits) in &codewords {
            let e = poisson_errors(bits * r, draw(c, step), limit);
            if e > limit {
                ok = false;
                break;
            }
            bit_errors += e;
        }
        if ok {
            return Decoded {
                retries: step,
                corrected: true,
                bit_errors,
            };
        }
    }
    Decoded {
        retries: config.max_retries,
        corrected: false,
        bit_errors: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::config::MediaConfig;

    /// The Poisson quantile matches the distribution's mean and its tail, and grows with λ
    /// for a fixed draw (a page's errors only grow).
    #[test]
    fn poisson_quantiles_have_the_distribution_and_grow_with_the_rate() {
        let n = 20_000;
        let draws: Vec<f64> = (0..n).map(|i| uniform(mix(7, &[i]))).collect();
        let mean = draws
            .iter()
            .map(|&u| poisson_errors(6.0, u, 100) as f64)
            .sum::<f64>()
            / n as f64;
        assert!((mean - 6.0).abs() < 0.1, "{mean}");
        // P(X > 24 | λ = 16) ≈ 0.022.
        let over = draws
            .iter()
            .filter(|&&u| poisson_errors(16.0, u, 24) > 24)
            .count() as f64
            / n as f64;
        assert!((over - 0.022).abs() < 0.005, "{over}");
        for &u in &draws[..500] {
            let mut last = 0;
            for lambda in [0.1, 1.0, 5.0, 20.0, 60.0, 500.0] {
                let e = poisson_errors(lambda, u, 24);
                assert!(e >= last, "λ {lambda} u {u}");
                last = e;
            }
        }
        assert_eq!(poisson_errors(0.0, 0.99, 24), 0);
        assert_eq!(poisson_errors(1e4, 0.01, 24), 25);
    }

    /// A read within the limit decodes at once; one beyond it decodes after the retries that
    /// take enough shift errors away, or fails when wear alone is beyond it.
    #[test]
    fn retries_remove_shift_errors_only() {
        let c = MediaConfig::part("mlc", 32).unwrap();
        let mid = |_: u32, _: u32| 0.5;
        let clean = Rber {
            fixed: 1e-4,
            shift: 0.0,
        };
        let d = decode(&c, clean, 4096, 128, Codewords::Page, mid);
        assert_eq!((d.retries, d.corrected), (0, true));
        let shifted = Rber {
            fixed: 1e-4,
            shift: 8e-3,
        };
        let d = decode(&c, shifted, 4096, 128, Codewords::Page, mid);
        assert!(d.corrected && d.retries >= 2, "{d:?}");
        let worn = Rber {
            fixed: 8e-3,
            shift: 0.0,
        };
        let d = decode(&c, worn, 4096, 128, Codewords::Page, mid);
        assert_eq!((d.retries, d.corrected), (c.max_retries, false));
        // The spare area alone, an eighth of a codeword's bits, decodes where the page fails.
        let d = decode(&c, worn, 4096, 128, Codewords::Spare, mid);
        assert!(d.corrected, "{d:?}");
    }
}
