//! What the soak tests of real software share (nbd_crash.rs, sql.rs): running the binary, and
//! a soak of `mobius crashtest --workload W ... --json` that must pass.

use std::process::Command;

/// `mobius ARGS`: whether it succeeded, its stdout and its stderr.
pub fn mobius(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_mobius"))
        .args(args)
        .output()
        .expect("run mobius");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A soak of `workload` (`nbd`, `sqlite`) over `designs` (`all` or a list), 20 torn cuts per
/// cell on two jobs.
#[allow(dead_code)] // crash_soak.rs includes this module for `mobius` only
pub struct Soak<'a> {
    pub designs: &'a str,
    pub workload: &'a str,
    /// `--cut-model` (`None`: the default, instants).
    pub cut_model: Option<&'a str>,
    pub seeds: usize,
    /// The first seed (`None`: fresh seeds).
    pub seed: Option<u64>,
    pub second_lives: usize,
}

#[allow(dead_code)]
impl Soak<'_> {
    /// Runs the soak and returns its JSON report, asserting it succeeded with no violation.
    pub fn passes(&self) -> serde_json::Value {
        let (seeds, seed, lives) = (
            self.seeds.to_string(),
            self.seed.map(|s| s.to_string()),
            self.second_lives.to_string(),
        );
        let mut args = vec!["crashtest", "--ftl", self.designs];
        args.extend(["--workload", self.workload]);
        if let Some(cut) = self.cut_model {
            args.extend(["--cut-model", cut]);
        }
        args.extend(["--seeds", &seeds]);
        if let Some(seed) = &seed {
            args.extend(["--seed", seed]);
        }
        args.extend(["--crash-points", "20", "--torn"]);
        if self.second_lives > 0 {
            args.extend(["--second-lives", &lives]);
        }
        args.extend(["--jobs", "2", "--json"]);
        let (ok, out, err) = mobius(&args);
        assert!(ok, "{out}{err}");
        let json: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
        assert_eq!(json["violations"], 0, "{out}{err}");
        json
    }
}
