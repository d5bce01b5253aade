//! The commands that hand work to Python (`mobius sweep`, `mobius compare --scheduler`) check
//! first that the modules they need import, and say how to install them if not.

/// Ok when `python3 -c "import {imports}"` succeeds; otherwise an error naming `command` and
/// the `install` hint.
pub fn require(imports: &str, command: &str, install: &str) -> anyhow::Result<()> {
    let probe = std::process::Command::new("python3")
        .args(["-c", &format!("import {imports}")])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        anyhow::bail!("{command} needs python3 with {imports}: {install} (docs/python.md)");
    }
    Ok(())
}
