//! The three plots: latency CDFs, timelines with events, grouped bars.

use super::scale::{tick_label, Scale};
use super::svg::{num, Doc};
use super::PALETTE;

/// The drawing area of a plot: the whole picture and the margins around the axes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Frame {
    pub width: f64,
    pub height: f64,
    pub left: f64,
    pub right: f64,
    pub top: f64,
    pub bottom: f64,
}

impl Frame {
    fn x_range(&self) -> (f64, f64) {
        (self.left, self.width - self.right)
    }
}

fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// A named line of (x, y) points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
        }
    }
}

fn polyline(doc: &mut Doc, s: &Series, i: usize, x: &Scale, y: &Scale, dashed: bool) {
    let pts: Vec<String> = s
        .points
        .iter()
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .map(|&(a, b)| format!("{},{}", num(x.map(a)), num(y.map(b))))
        .collect();
    let mut attrs = vec![
        ("class", "series".to_string()),
        ("data-series", s.name.clone()),
        ("points", pts.join(" ")),
        ("fill", "none".to_string()),
        ("stroke", color(i).to_string()),
        ("stroke-width", "1.8".to_string()),
    ];
    if dashed {
        attrs.push(("stroke-dasharray", "5,3".to_string()));
    }
    doc.empty("polyline", &attrs);
}

/// Grid, ticks and tick labels of one x and one y axis around the box they span.
fn axes(doc: &mut Doc, x: &Scale, y: &Scale, x_labels: bool) {
    let (x0, x1) = x.range();
    let (y0, y1) = y.range();
    for t in y.ticks() {
        let py = y.map(t);
        doc.line(x0, py, x1, py, r##"stroke="#e0e0e0""##);
        doc.text(x0 - 5.0, py + 4.0, "end", "", &tick_label(t));
    }
    for t in x.ticks() {
        let px = x.map(t);
        doc.line(px, y0, px, y1, r##"stroke="#e0e0e0""##);
        if x_labels {
            doc.text(px, y0 + 15.0, "middle", "", &tick_label(t));
        }
    }
    doc.empty(
        "rect",
        &[
            ("x", num(x0)),
            ("y", num(y1.min(y0))),
            ("width", num(x1 - x0)),
            ("height", num((y0 - y1).abs())),
            ("fill", "none".into()),
            ("stroke", "black".into()),
        ],
    );
}

fn legend(doc: &mut Doc, names: &[&str], x: f64, y: f64, dashed: impl Fn(usize) -> bool) {
    for (i, n) in names.iter().enumerate() {
        let yy = y + 16.0 * i as f64;
        let style = format!(
            r#"stroke="{}" stroke-width="2"{}"#,
            color(i),
            if dashed(i) {
                r#" stroke-dasharray="5,3""#
            } else {
                ""
            }
        );
        doc.line(x, yy, x + 22.0, yy, &style);
        doc.text(x + 27.0, yy + 4.0, "start", r#"class="legend""#, n);
    }
}

fn title(doc: &mut Doc, f: &Frame, t: &str) {
    let (a, b) = f.x_range();
    doc.text((a + b) / 2.0, 20.0, "middle", r#"font-size="14""#, t);
}

// ---- latency CDF ----

/// One CDF line: (latency µs, fraction of requests at or below it), x ascending.
#[derive(Clone, Debug, PartialEq)]
pub struct CdfSeries {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

impl CdfSeries {
    /// From (value µs, count) pairs in ascending value order, thinned so that consecutive
    /// points are at least 1% apart in latency (the last point always kept).
    pub fn from_counts(
        name: impl Into<String>,
        counts: impl IntoIterator<Item = (f64, u64)>,
    ) -> CdfSeries {
        let counts: Vec<(f64, u64)> = counts.into_iter().filter(|c| c.1 > 0).collect();
        let total: u64 = counts.iter().map(|c| c.1).sum();
        let mut points = Vec::new();
        let mut cum = 0u64;
        for (i, &(v, c)) in counts.iter().enumerate() {
            cum += c;
            let last = i + 1 == counts.len();
            let far = points
                .last()
                .is_none_or(|&(px, _): &(f64, f64)| v >= px * 1.01);
            if far || last {
                let f = cum as f64 / total as f64;
                match points.last_mut() {
                    Some(p) if !far => *p = (v, f),
                    _ => points.push((v, f)),
                }
            }
        }
        CdfSeries {
            name: name.into(),
            points,
        }
    }

    /// From latencies in µs (any order).
    pub fn from_latencies_us(name: impl Into<String>, latencies: &[f64]) -> CdfSeries {
        let mut v: Vec<f64> = latencies
            .iter()
            .copied()
            .filter(|x| x.is_finite())
            .collect();
        v.sort_by(f64::total_cmp);
        let mut counts: Vec<(f64, u64)> = Vec::new();
        for x in v {
            match counts.last_mut() {
                Some(c) if c.0 == x => c.1 += 1,
                _ => counts.push((x, 1)),
            }
        }
        Self::from_counts(name, counts)
    }

    /// From an HDR histogram of nanoseconds (as the load generator records them).
    pub fn from_histogram_ns(
        name: impl Into<String>,
        h: &hdrhistogram::Histogram<u64>,
    ) -> CdfSeries {
        Self::from_counts(
            name,
            h.iter_recorded().map(|v| {
                (
                    v.value_iterated_to() as f64 / 1000.0,
                    v.count_since_last_iteration(),
                )
            }),
        )
    }
}

/// Latency CDFs of several series, latency on a log axis in µs.
#[derive(Clone, Debug)]
pub struct CdfPlot {
    pub title: String,
    pub series: Vec<CdfSeries>,
    pub frame: Frame,
}

impl CdfPlot {
    pub fn new(title: impl Into<String>, series: Vec<CdfSeries>) -> CdfPlot {
        CdfPlot {
            title: title.into(),
            series,
            frame: Frame {
                width: 800.0,
                height: 400.0,
                left: 60.0,
                right: 230.0,
                top: 36.0,
                bottom: 48.0,
            },
        }
    }

    /// The x (latency µs, log, whole decades around the data) and y (fraction) scales.
    pub fn scales(&self) -> (Scale, Scale) {
        let xs = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0));
        let (lo, hi) = xs
            .filter(|&x| x > 0.0)
            .fold((f64::MAX, f64::MIN), |a, x| (a.0.min(x), a.1.max(x)));
        let (lo, hi) = if lo <= hi { (lo, hi) } else { (1.0, 10.0) };
        let d0 = 10f64.powf(lo.log10().floor());
        let d1 = 10f64.powf(hi.log10().ceil()).max(d0 * 10.0);
        let f = &self.frame;
        let (x0, x1) = f.x_range();
        (
            Scale::log(d0, d1, x0, x1),
            Scale::linear(0.0, 1.0, f.height - f.bottom, f.top),
        )
    }

    pub fn to_svg(&self) -> String {
        let f = self.frame;
        let (x, y) = self.scales();
        let mut doc = Doc::new(f.width, f.height, &self.title);
        title(&mut doc, &f, &self.title);
        axes(&mut doc, &x, &y, true);
        // p50 and p99 guides.
        let (x0, x1) = f.x_range();
        for (q, label) in [(0.5, "p50"), (0.99, "p99")] {
            let py = y.map(q);
            doc.line(
                x0,
                py,
                x1,
                py,
                r##"stroke="#999999" stroke-dasharray="2,3""##,
            );
            doc.text(x1 + 3.0, py + 4.0, "start", r##"fill="#777777""##, label);
        }
        for (i, s) in self.series.iter().enumerate() {
            let line = Series::new(s.name.clone(), s.points.clone());
            polyline(&mut doc, &line, i, &x, &y, false);
        }
        let names: Vec<&str> = self.series.iter().map(|s| s.name.as_str()).collect();
        legend(&mut doc, &names, x1 + 30.0, f.top + 10.0, |_| false);
        doc.text(
            (x0 + x1) / 2.0,
            f.height - 10.0,
            "middle",
            "",
            "latency (µs, log scale)",
        );
        doc.text(
            16.0,
            (f.top + f.height - f.bottom) / 2.0,
            "middle",
            &format!(
                "transform=\"rotate(-90 16 {})\"",
                num((f.top + f.height - f.bottom) / 2.0)
            ),
            "fraction of requests ≤ latency",
        );
        doc.finish()
    }
}

// ---- timeline ----

/// A moment to mark, e.g. (12.0, "node 3 killed").
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub t: f64,
    pub label: String,
}

/// A shaded stretch of time, e.g. while a node is down.
#[derive(Clone, Debug, PartialEq)]
pub struct TimelineBand {
    pub from: f64,
    pub to: f64,
    pub label: String,
}

/// One panel: its y axis label and its lines (x = seconds).
#[derive(Clone, Debug, PartialEq)]
pub struct TimelinePanel {
    pub y_label: String,
    pub series: Vec<Series>,
}

/// Panels stacked over one time axis (seconds), with events and bands across all of them.
#[derive(Clone, Debug)]
pub struct Timeline {
    pub title: String,
    pub panels: Vec<TimelinePanel>,
    pub events: Vec<Event>,
    pub bands: Vec<TimelineBand>,
    /// Width; the height follows from the panels.
    pub width: f64,
    pub panel_height: f64,
}

const TL_LEFT: f64 = 70.0;
const TL_RIGHT: f64 = 210.0;
const TL_GAP: f64 = 22.0;
const TL_BOTTOM: f64 = 44.0;
const LABEL_ROW: f64 = 14.0;

impl Timeline {
    pub fn new(title: impl Into<String>, panels: Vec<TimelinePanel>) -> Timeline {
        Timeline {
            title: title.into(),
            panels,
            events: Vec::new(),
            bands: Vec::new(),
            width: 860.0,
            panel_height: 170.0,
        }
    }

    /// Rows of event labels (each label goes in the first row where it does not overlap the
    /// previous label), by event index.
    fn label_rows(&self, x: &Scale) -> (Vec<usize>, usize) {
        let mut order: Vec<usize> = (0..self.events.len()).collect();
        order.sort_by(|&a, &b| self.events[a].t.total_cmp(&self.events[b].t));
        let mut row_end: Vec<f64> = Vec::new();
        let mut rows = vec![0; self.events.len()];
        for i in order {
            let e = &self.events[i];
            let px = x.map(e.t);
            let w = 6.5 * e.label.chars().count() as f64 + 8.0;
            let r = row_end.iter().position(|&end| px > end).unwrap_or_else(|| {
                row_end.push(f64::MIN);
                row_end.len() - 1
            });
            row_end[r] = px + w;
            rows[i] = r;
        }
        (rows, row_end.len())
    }

    fn top(&self, label_rows: usize) -> f64 {
        34.0 + LABEL_ROW * label_rows as f64
    }

    fn x_domain(&self) -> (f64, f64) {
        let ts = self
            .panels
            .iter()
            .flat_map(|p| p.series.iter().flat_map(|s| s.points.iter().map(|q| q.0)))
            .chain(self.events.iter().map(|e| e.t))
            .chain(self.bands.iter().flat_map(|b| [b.from, b.to]));
        let (lo, hi) = ts.fold((f64::MAX, f64::MIN), |a, t| (a.0.min(t), a.1.max(t)));
        if lo <= hi {
            (lo.min(0.0), hi)
        } else {
            (0.0, 1.0)
        }
    }

    /// The time scale (seconds → x pixel).
    pub fn x_scale(&self) -> Scale {
        let (lo, hi) = self.x_domain();
        Scale::linear(lo, hi, TL_LEFT, self.width - TL_RIGHT)
    }

    /// The y scale of panel `i` (from 0 to a round value above its largest point).
    pub fn y_scale(&self, i: usize) -> Scale {
        let x = self.x_scale();
        let (_, rows) = self.label_rows(&x);
        let top = self.top(rows) + i as f64 * (self.panel_height + TL_GAP);
        let max = self.panels[i]
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        let ticks = super::scale::linear_ticks(0.0, if max > 0.0 { max } else { 1.0 }, 4);
        let step = if ticks.len() >= 2 {
            ticks[1] - ticks[0]
        } else {
            1.0
        };
        let hi = ticks.last().copied().unwrap_or(1.0);
        let hi = if hi < max * 0.999 { hi + step } else { hi }.max(f64::MIN_POSITIVE);
        Scale::linear(0.0, hi, top + self.panel_height, top)
    }

    pub fn height(&self) -> f64 {
        let (_, rows) = self.label_rows(&self.x_scale());
        self.top(rows) + self.panels.len() as f64 * (self.panel_height + TL_GAP) - TL_GAP
            + TL_BOTTOM
    }

    pub fn to_svg(&self) -> String {
        let x = self.x_scale();
        let (rows, nrows) = self.label_rows(&x);
        let h = self.height();
        let mut doc = Doc::new(self.width, h, &self.title);
        let (x0, x1) = x.range();
        doc.text(
            (x0 + x1) / 2.0,
            20.0,
            "middle",
            r#"font-size="14""#,
            &self.title,
        );
        let top = self.top(nrows);
        let bottom = h - TL_BOTTOM;
        for b in &self.bands {
            let (a, c) = (x.map(b.from), x.map(b.to));
            doc.empty(
                "rect",
                &[
                    ("class", "band".into()),
                    ("data-label", b.label.clone()),
                    ("x", num(a.min(c))),
                    ("y", num(top)),
                    ("width", num((c - a).abs())),
                    ("height", num(bottom - top)),
                    ("fill", "#fde0c5".into()),
                    ("fill-opacity", "0.6".into()),
                ],
            );
            doc.text(
                (a + c) / 2.0,
                bottom - 4.0,
                "middle",
                r##"fill="#a05000""##,
                &b.label,
            );
        }
        let names = {
            let mut v: Vec<&str> = Vec::new();
            for p in &self.panels {
                for s in &p.series {
                    if !v.contains(&s.name.as_str()) {
                        v.push(&s.name);
                    }
                }
            }
            v
        };
        for (i, p) in self.panels.iter().enumerate() {
            let y = self.y_scale(i);
            axes(&mut doc, &x, &y, i + 1 == self.panels.len());
            let (ya, yb) = y.range();
            let mid = (ya + yb) / 2.0;
            doc.text(
                18.0,
                mid,
                "middle",
                &format!("transform=\"rotate(-90 18 {})\"", num(mid)),
                &p.y_label,
            );
            for s in &p.series {
                let ci = names.iter().position(|n| *n == s.name).unwrap_or(0);
                polyline(&mut doc, s, ci, &x, &y, false);
            }
            // This panel's legend beside it, in the colours its lines have.
            for (j, s) in p.series.iter().enumerate() {
                let ci = names.iter().position(|n| *n == s.name).unwrap_or(0);
                let yy = yb + 10.0 + 16.0 * j as f64;
                let style = format!(r#"stroke="{}" stroke-width="2""#, color(ci));
                doc.line(x1 + 15.0, yy, x1 + 37.0, yy, &style);
                doc.text(x1 + 42.0, yy + 4.0, "start", r#"class="legend""#, &s.name);
            }
        }
        for (e, &r) in self.events.iter().zip(&rows) {
            let px = x.map(e.t);
            let ly = 34.0 + LABEL_ROW * r as f64;
            doc.open(
                "g",
                &[("class", "event".into()), ("data-label", e.label.clone())],
            );
            doc.line(
                px,
                ly - 2.0,
                px,
                bottom,
                r##"stroke="#b00020" stroke-width="1.2" stroke-dasharray="4,3""##,
            );
            doc.text(px + 3.0, ly + 6.0, "start", r##"fill="#b00020""##, &e.label);
            doc.close("g");
        }
        doc.text((x0 + x1) / 2.0, h - 10.0, "middle", "", "time (s)");
        doc.finish()
    }
}

// ---- grouped bars ----

/// Groups of bars: `values[g][s]` is series `s` in group `g` (NaN: no bar).
#[derive(Clone, Debug)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub series: Vec<String>,
    pub groups: Vec<String>,
    pub values: Vec<Vec<f64>>,
    pub frame: Frame,
    /// Print each bar's value above it.
    pub show_values: bool,
}

impl BarChart {
    pub fn new(
        title: impl Into<String>,
        y_label: impl Into<String>,
        series: Vec<String>,
        groups: Vec<String>,
        values: Vec<Vec<f64>>,
    ) -> BarChart {
        BarChart {
            title: title.into(),
            y_label: y_label.into(),
            series,
            groups,
            values,
            frame: Frame {
                width: 720.0,
                height: 380.0,
                left: 70.0,
                right: 170.0,
                top: 36.0,
                bottom: 56.0,
            },
            show_values: true,
        }
    }

    /// The y scale: from 0 (or a round value below the lowest bar, when a bar is negative) to
    /// a round value above the largest bar.
    pub fn y_scale(&self) -> Scale {
        let finite = || {
            self.values
                .iter()
                .flatten()
                .copied()
                .filter(|v| v.is_finite())
        };
        let max = finite().fold(0.0, f64::max);
        let min = finite().fold(0.0, f64::min);
        let span_hi = if max > min { max } else { min + 1.0 };
        let ticks = super::scale::linear_ticks(min, span_hi, 5);
        let step = if ticks.len() >= 2 {
            ticks[1] - ticks[0]
        } else {
            1.0
        };
        let hi = ticks.last().copied().unwrap_or(span_hi);
        let hi = if hi < max * 0.999 { hi + step } else { hi };
        let lo = ticks.first().copied().unwrap_or(min);
        let lo = if lo > min { lo - step } else { lo };
        let f = &self.frame;
        Scale::linear(lo, hi, f.height - f.bottom, f.top)
    }

    /// Left edge and width of the bar of series `s` in group `g`.
    pub fn bar_x(&self, g: usize, s: usize) -> (f64, f64) {
        let (x0, x1) = self.frame.x_range();
        let gw = (x1 - x0) / self.groups.len().max(1) as f64;
        let inner = gw * 0.8;
        let bw = inner / self.series.len().max(1) as f64;
        (x0 + gw * g as f64 + gw * 0.1 + bw * s as f64, bw)
    }

    pub fn to_svg(&self) -> String {
        let f = self.frame;
        let y = self.y_scale();
        let (x0, x1) = f.x_range();
        let mut doc = Doc::new(f.width, f.height, &self.title);
        title(&mut doc, &f, &self.title);
        // Only horizontal grid lines: a category axis has no x ticks.
        for t in y.ticks() {
            let py = y.map(t);
            doc.line(x0, py, x1, py, r##"stroke="#e0e0e0""##);
            doc.text(x0 - 5.0, py + 4.0, "end", "", &tick_label(t));
        }
        let base = y.map(0.0);
        // The frame's bottom: below the zero line when a bar is negative.
        let bottom = f.height - f.bottom;
        for (g, name) in self.groups.iter().enumerate() {
            for (s, series) in self.series.iter().enumerate() {
                let v = self
                    .values
                    .get(g)
                    .and_then(|r| r.get(s))
                    .copied()
                    .unwrap_or(f64::NAN);
                if !v.is_finite() {
                    continue;
                }
                let (bx, bw) = self.bar_x(g, s);
                let top = y.map(v);
                doc.empty(
                    "rect",
                    &[
                        ("class", "bar".into()),
                        ("data-series", series.clone()),
                        ("data-group", name.clone()),
                        ("data-value", format!("{v}")),
                        ("x", num(bx)),
                        ("y", num(top.min(base))),
                        ("width", num(bw * 0.92)),
                        ("height", num((base - top).abs())),
                        ("fill", color(s).into()),
                    ],
                );
                if self.show_values {
                    // Above a positive bar, below a negative one.
                    let ty = if v >= 0.0 { top - 3.0 } else { top + 11.0 };
                    doc.text(
                        bx + bw * 0.46,
                        ty,
                        "middle",
                        r#"font-size="9""#,
                        &tick_label(v),
                    );
                }
            }
            let (gx, _) = self.bar_x(g, 0);
            let gw = (x1 - x0) / self.groups.len().max(1) as f64;
            doc.text(gx - gw * 0.1 + gw / 2.0, bottom + 16.0, "middle", "", name);
        }
        doc.line(x0, base, x1, base, r#"stroke="black""#);
        doc.line(x0, f.top, x0, bottom, r#"stroke="black""#);
        let names: Vec<&str> = self.series.iter().map(String::as_str).collect();
        // Legend swatches are bars, not lines.
        for (i, n) in names.iter().enumerate() {
            let yy = f.top + 10.0 + 16.0 * i as f64;
            doc.empty(
                "rect",
                &[
                    ("x", num(x1 + 20.0)),
                    ("y", num(yy - 6.0)),
                    ("width", "12".into()),
                    ("height", "12".into()),
                    ("fill", color(i).into()),
                ],
            );
            doc.text(x1 + 37.0, yy + 4.0, "start", r#"class="legend""#, n);
        }
        let mid = (f.top + bottom) / 2.0;
        doc.text(
            18.0,
            mid,
            "middle",
            &format!("transform=\"rotate(-90 18 {})\"", num(mid)),
            &self.y_label,
        );
        doc.finish()
    }
}
