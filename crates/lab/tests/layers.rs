//! The crates' layers (docs/architecture.md and its figure, docs/architecture.svg): every crate of
//! the workspace and the Python package depends only on crates of lower layers, as [`LAYERS`]
//! declares them. This test reads every `crates/*/Cargo.toml` and `python/Cargo.toml`; a crate
//! that gains a dependency on its own layer or one above fails it, and so does a crate the
//! table does not place.
//!
//! `[dependencies]` (and `[build-dependencies]`) must point strictly down. `[dev-dependencies]`
//! must point down too, but a crate below the harness (the `lab` and `crashtest` layers) may
//! also reach up to it: a design's tests drive it through the lab's request driver and judge it
//! with the crash checker, which are built on the designs. A test of a crate below the front
//! ends never depends on one (`nbd`, `compare`, `cli`, `python`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layers, bottom up; a crate is named by its directory (`crates/<name>`, `python`).
/// docs/architecture.svg draws the same table (`tools/architecture-svg` draws it from here;
/// checked below).
const LAYERS: &[(&str, &[&str])] = &[
    ("emulated NAND flash", &["flash"]),
    ("FTL interfaces, shared parts", &["ftl"]),
    (
        "host layer; designs",
        &[
            "host",
            "dftl",
            "mftl",
            "atomic-write",
            "txflash",
            "wcache",
            "fast",
        ],
    ),
    (
        "designs on designs; workloads; traces",
        &["lighttx", "optr", "workload", "trace"],
    ),
    ("software on a device", &["nvmfs", "sqlite"]),
    ("the lab (harness)", &["lab"]),
    ("crash checker", &["crashtest"]),
    ("NBD server", &["nbd"]),
    ("experiments, report", &["compare"]),
    ("front ends", &["cli", "python"]),
];

/// The highest layer a dev-dependency may reach: the harness.
const DEV_REACH: &str = "crashtest";

/// What one manifest declares: its package name and the workspace crates it depends on, by
/// package name, normal (with build) and dev.
#[derive(Debug, Default, Clone)]
struct Manifest {
    package: String,
    normal: Vec<String>,
    dev: Vec<String>,
}

fn parse_manifest(text: &str) -> Manifest {
    let doc: toml::Table = toml::from_str(text).expect("a Cargo.toml parses");
    let package = doc["package"]["name"]
        .as_str()
        .expect("package.name")
        .to_string();
    let deps = |section: &str| -> Vec<String> {
        let Some(table) = doc.get(section).and_then(|t| t.as_table()) else {
            return Vec::new();
        };
        table
            .iter()
            .map(|(key, spec)| {
                spec.get("package")
                    .and_then(|p| p.as_str())
                    .unwrap_or(key)
                    .to_string()
            })
            .collect()
    };
    let mut normal = deps("dependencies");
    normal.extend(deps("build-dependencies"));
    Manifest {
        package,
        normal,
        dev: deps("dev-dependencies"),
    }
}

/// Every crate's manifest, by crate name (its directory).
fn workspace_manifests(root: &Path) -> BTreeMap<String, Manifest> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.join("Cargo.toml").exists())
        .collect();
    dirs.push(root.join("python"));
    dirs.iter()
        .map(|dir| {
            let name = dir.file_name().unwrap().to_string_lossy().to_string();
            let text = std::fs::read_to_string(dir.join("Cargo.toml")).expect("Cargo.toml");
            (name, parse_manifest(&text))
        })
        .collect()
}

/// Every dependency that breaks the layers, one line each; empty when the layers hold.
fn violations(layers: &[(&str, &[&str])], manifests: &BTreeMap<String, Manifest>) -> Vec<String> {
    let layer_of: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, (_, crates))| crates.iter().map(move |c| (*c, i)))
        .collect();
    let dev_reach = layer_of[DEV_REACH];
    let by_package: BTreeMap<&str, &str> = manifests
        .iter()
        .map(|(name, m)| (m.package.as_str(), name.as_str()))
        .collect();
    let mut found = Vec::new();
    for name in layer_of.keys() {
        if !manifests.contains_key(*name) {
            found.push(format!("the table places {name}, which has no Cargo.toml"));
        }
    }
    for (name, m) in manifests {
        let Some(&own) = layer_of.get(name.as_str()) else {
            found.push(format!("{name} is in no layer of the table"));
            continue;
        };
        let kinds = [
            ("depends on", &m.normal, own),
            ("dev-depends on", &m.dev, own.max(dev_reach + 1)),
        ];
        for (how, deps, below) in kinds {
            for dep in deps.iter().filter_map(|d| by_package.get(d.as_str())) {
                let theirs = layer_of.get(dep).copied().unwrap_or(usize::MAX);
                if theirs < below {
                    continue;
                }
                found.push(format!(
                    "{name} ({}) {how} {dep} ({})",
                    layers[own].0,
                    layers.get(theirs).map_or("no layer", |l| l.0)
                ));
            }
        }
    }
    found
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_crate_depends_only_on_lower_layers() {
    let root = workspace_root();
    let manifests = workspace_manifests(&root);
    assert!(manifests.len() > 15, "read {} manifests", manifests.len());
    let found = violations(LAYERS, &manifests);
    assert!(
        found.is_empty(),
        "the layers are broken:\n{}",
        found.join("\n")
    );
}

/// The crates each layer of an SVG drawn like docs/architecture.svg shows: its groups
/// `<g class="layer" data-layer="i">` and their `<text class="crate" …>name</text>`, in order.
fn drawn_layers(svg: &str) -> Vec<Vec<String>> {
    svg.split(r#"<g class="layer" data-layer=""#)
        .skip(1)
        .map(|group| {
            let group = &group[..group.find("</g>").expect("a layer group ends")];
            group
                .split(r#"<text class="crate""#)
                .skip(1)
                .map(|t| {
                    let name = &t[t.find('>').expect("a text's tag ends") + 1..];
                    name[..name.find('<').expect("a text ends")].to_string()
                })
                .collect()
        })
        .collect()
}

#[test]
fn the_figure_draws_the_table() {
    let svg = std::fs::read_to_string(workspace_root().join("docs/architecture.svg"))
        .expect("docs/architecture.svg");
    let table: Vec<Vec<String>> = LAYERS
        .iter()
        .map(|(_, crates)| crates.iter().map(|c| c.to_string()).collect())
        .collect();
    assert_eq!(
        drawn_layers(&svg),
        table,
        "docs/architecture.svg and LAYERS differ: run tools/architecture-svg"
    );
}

/// The checker on doctored manifests: what it must catch.
mod checker {
    use super::*;

    const TABLE: &[(&str, &[&str])] = &[
        ("bottom", &["flash"]),
        ("interfaces", &["ftl"]),
        ("middle", &["host", "dftl"]),
        ("harness", &["crashtest"]),
        ("front", &["cli"]),
    ];

    fn manifest(name: &str, normal: &[&str], dev: &[&str]) -> (String, Manifest) {
        let package = |n: &&str| format!("mobius-{n}");
        let m = Manifest {
            package: package(&name),
            normal: normal.iter().map(package).collect(),
            dev: dev.iter().map(package).collect(),
        };
        (name.to_string(), m)
    }

    /// A workspace whose every dependency points down, but `doctored`'s, which are `normal`
    /// and `dev`.
    fn workspace(doctored: &str, normal: &[&str], dev: &[&str]) -> BTreeMap<String, Manifest> {
        let mut ws: BTreeMap<String, Manifest> = [
            manifest("flash", &[], &[]),
            manifest("ftl", &["flash"], &[]),
            manifest("host", &["flash", "ftl"], &[]),
            manifest("dftl", &["flash", "ftl"], &["crashtest"]),
            manifest("crashtest", &["ftl", "dftl"], &[]),
            manifest("cli", &["crashtest", "host"], &[]),
        ]
        .into_iter()
        .collect();
        ws.extend([manifest(doctored, normal, dev)]);
        ws
    }

    #[test]
    fn holds_when_every_dependency_points_down() {
        let ws = workspace("host", &["flash", "ftl"], &["dftl", "crashtest"]);
        assert_eq!(violations(TABLE, &ws), Vec::<String>::new());
    }

    #[test]
    fn an_upward_dependency_fails() {
        let found = violations(TABLE, &workspace("ftl", &["flash", "crashtest"], &[]));
        assert_eq!(
            found,
            vec!["ftl (interfaces) depends on crashtest (harness)".to_string()]
        );
    }

    #[test]
    fn a_dependency_within_the_layer_fails() {
        let found = violations(TABLE, &workspace("host", &["ftl", "dftl"], &[]));
        assert_eq!(
            found,
            vec!["host (middle) depends on dftl (middle)".to_string()]
        );
    }

    #[test]
    fn a_dev_dependency_reaches_the_harness_but_not_a_front_end() {
        let ws = workspace("ftl", &["flash"], &["crashtest"]);
        assert!(violations(TABLE, &ws).is_empty());
        let found = violations(TABLE, &workspace("ftl", &["flash"], &["cli"]));
        assert_eq!(
            found,
            vec!["ftl (interfaces) dev-depends on cli (front)".to_string()]
        );
    }

    #[test]
    fn a_crate_outside_the_table_fails() {
        let ws = workspace("newcomer", &["flash"], &[]);
        assert_eq!(
            violations(TABLE, &ws),
            vec!["newcomer is in no layer of the table"]
        );
    }

    #[test]
    fn a_crate_the_table_places_but_the_workspace_lacks_fails() {
        let mut ws = workspace("ftl", &["flash"], &[]);
        ws.remove("host");
        let found = violations(TABLE, &ws);
        assert_eq!(
            found,
            vec!["the table places host, which has no Cargo.toml"]
        );
    }

    #[test]
    fn a_figure_with_a_crate_in_another_layer_differs() {
        let svg = r#"<g class="layer" data-layer="0"><text class="crate" x="1">flash</text></g>
<g class="layer" data-layer="1"><text class="crate" x="1">ftl</text><text class="crate">host</text></g>"#;
        assert_eq!(drawn_layers(svg), vec![vec!["flash"], vec!["ftl", "host"]]);
        let moved = svg.replace(r#"<text class="crate">host</text>"#, "");
        assert_ne!(
            drawn_layers(&moved),
            vec![vec!["flash"], vec!["ftl", "host"]]
        );
    }

    #[test]
    fn a_manifest_parses_with_renamed_packages() {
        let m = parse_manifest(
            "[package]\nname = \"mobius-x\"\n[dependencies]\nf = { package = \"mobius-flash\", path = \"../flash\" }\nserde = \"1\"\n[dev-dependencies]\nmobius-ftl.workspace = true\n",
        );
        assert_eq!(m.package, "mobius-x");
        assert_eq!(m.normal, vec!["mobius-flash", "serde"]);
        assert_eq!(m.dev, vec!["mobius-ftl"]);
    }
}
