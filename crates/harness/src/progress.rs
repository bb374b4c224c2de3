//! The progress bars commands and benchmarks show: on standard error when it is a terminal and
//! `INEC_NO_PROGRESS` is unset, hidden otherwise, so that piped output carries nothing extra.

use std::io::IsTerminal;

/// Whether progress bars are shown: standard error is a terminal and `INEC_NO_PROGRESS` is
/// unset. A command that prints plain lines in their place asks this.
pub fn shown() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("INEC_NO_PROGRESS").is_none()
}

/// A bar of `total` steps named `what`; with `bytes`, its counts and rate are shown as bytes.
pub fn bar(total: u64, what: &str, bytes: bool) -> indicatif::ProgressBar {
    let template = if bytes {
        "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}"
    } else {
        "{msg} [{bar:30}] {pos}/{len} eta {eta}"
    };
    styled(total, what, template)
}

/// A bar of `total` steps named `what` that shows the time elapsed instead of counts (a phase
/// of a known length, its position moved by the caller).
pub fn clock(total: u64, what: &str) -> indicatif::ProgressBar {
    styled(total, what, "{msg} [{bar:30}] {elapsed}")
}

/// A spinner named `what` with the time elapsed, ticking by itself every 200 ms (work of an
/// unknown length).
pub fn spinner(what: &str) -> indicatif::ProgressBar {
    let bar = styled(0, what, "{msg} {spinner} {elapsed}");
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}

fn styled(total: u64, what: &str, template: &str) -> indicatif::ProgressBar {
    if !shown() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_string());
    bar
}
