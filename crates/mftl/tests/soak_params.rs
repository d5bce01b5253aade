//! The soak's parameter sets for Möbius on every soak geometry: its striped ALA
//! (`ala_stripe=4`) is drawn wherever the device has the chips for it, and never where Möbius
//! refuses it (one chip), so a varying soak does not fail a cell on an option it chose itself.
//! A soak given `--param ala_stripe=4` does not draw that geometry for Möbius at all.

use crashtest::soak::{cell_config, soak_options, SoakConfig, SoakGeometry, SOAK_GEOMETRIES};
use ftl::DesignOptions;

fn soak() -> SoakConfig {
    SoakConfig::varying(vec![mftl::spec()], (0..40).collect())
}

/// The `ala_stripe` values 40 seeds draw on `geometry` (none: the defaults).
fn stripes_drawn(geometry: &SoakGeometry) -> Vec<Option<String>> {
    let cfg = soak();
    let device = geometry.device();
    (0..40)
        .map(|seed| {
            soak_options(&cfg, &cfg.designs[0], &device, seed)
                .params
                .get("ala_stripe")
                .cloned()
        })
        .collect()
}

#[test]
fn the_striped_ala_is_drawn_where_it_fits_and_never_on_one_chip() {
    for g in SOAK_GEOMETRIES {
        let drawn = stripes_drawn(&g);
        if g.channels * g.chips_per_channel < 4 {
            assert!(drawn.iter().all(Option::is_none), "{}: {drawn:?}", g.name);
        } else {
            assert!(
                drawn.iter().any(|s| s.as_deref() == Some("4")),
                "{}: {drawn:?}",
                g.name
            );
            assert!(drawn.iter().any(Option::is_none), "{}: {drawn:?}", g.name);
        }
    }
}

#[test]
fn a_soak_given_a_striped_ala_draws_only_geometries_with_the_chips_for_it() {
    let mut cfg = soak();
    cfg.options = DesignOptions::default().with("ala_stripe", "4");
    let design = cfg.designs[0].clone();
    let drawn: std::collections::BTreeSet<&str> = (0..60)
        .map(|seed| cell_config(&cfg, &design, seed).1.geometry)
        .collect();
    let fitting: std::collections::BTreeSet<&str> = SOAK_GEOMETRIES
        .iter()
        .filter(|g| g.channels * g.chips_per_channel >= 4)
        .map(|g| g.name)
        .collect();
    assert_eq!(drawn, fitting);
}
