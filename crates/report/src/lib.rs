//! Self-contained report writers: SVG plots (latency CDFs on a log axis, timelines with event
//! markers, grouped bars) and a standalone HTML page that embeds them beside tables. No
//! plotting crate: each plot is a few hundred lines of SVG text a browser shows as it is.
//!
//! - [`CdfPlot`]: one line per series of the fraction of requests at or below a latency, the
//!   latency on a log axis in µs (the INEC paper's Figures 9–13).
//! - [`Timeline`]: stacked panels sharing a time axis in seconds (throughput, p99 latency, …),
//!   with vertical markers and labels for events ("node 3 killed") and shaded bands.
//! - [`BarChart`]: groups of bars, one bar per series in each group.
//! - [`Page`]: headings, paragraphs, tables (Markdown-like rows) and the SVGs inline, in one
//!   HTML file with no outside reference.
//!
//! Every plot maps values through a [`Scale`] that is public, so tests (and readers) can check
//! that a point lands where the axis says.
#![forbid(unsafe_code)]

mod html;
mod plots;
mod scale;
mod svg;

pub use html::{Page, Table};
pub use plots::{
    BarChart, CdfPlot, CdfSeries, Event, Frame, Series, Timeline, TimelineBand, TimelinePanel,
};
pub use scale::{linear_ticks, log_ticks, Scale};
pub use svg::escape;

/// The colours series take, in order (a colour-blind-safe set).
pub const PALETTE: [&str; 8] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442",
];

#[cfg(test)]
mod tests;
