//! The progress bars commands and benchmarks show: on standard error when it is a terminal and
//! `INEC_NO_PROGRESS` is unset, hidden otherwise, so that piped output carries nothing extra.

use std::io::IsTerminal;

/// A bar of `total` steps named `what`; with `bytes`, its counts and rate are shown as bytes.
pub fn bar(total: u64, what: &str, bytes: bool) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() || std::env::var_os("INEC_NO_PROGRESS").is_some() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    let template = if bytes {
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
    } else {
        "{msg} [{bar:30}] {pos}/{len} eta {eta}"
    };
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}
