//! Progress bars on stderr, hidden when stderr is not a terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

pub fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = if std::io::stderr().is_terminal() {
        ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    pb.set_style(
        ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} ({eta})")
            .expect("static template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}
