//! The plots parse as XML and put every point where their scales say.

use super::*;

fn parse(svg: &str) -> roxmltree::Document<'_> {
    let doc = roxmltree::Document::parse(svg).expect("well-formed SVG");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    doc
}

fn points_of(doc: &roxmltree::Document<'_>, series: &str) -> Vec<(f64, f64)> {
    let line = doc
        .descendants()
        .find(|n| n.has_tag_name("polyline") && n.attribute("data-series") == Some(series))
        .unwrap_or_else(|| panic!("no polyline of {series}"));
    line.attribute("points")
        .unwrap()
        .split_whitespace()
        .map(|p| {
            let (x, y) = p.split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 0.011
}

#[test]
fn cdf_points_land_on_the_log_scale() {
    let a = CdfSeries::from_latencies_us("normal <read>", &[1000.0, 10.0, 100.0]);
    assert_eq!(
        a.points,
        vec![(10.0, 1.0 / 3.0), (100.0, 2.0 / 3.0), (1000.0, 1.0)]
    );
    let b = CdfSeries::from_latencies_us("degraded", &[50.0, 50.0, 5000.0, 20.0]);
    assert_eq!(b.points, vec![(20.0, 0.25), (50.0, 0.75), (5000.0, 1.0)]);
    let plot = CdfPlot::new("reads & writes", vec![a.clone(), b]);
    let (x, y) = plot.scales();
    // Whole decades around the data: 10 µs .. 10 ms.
    assert_eq!(x.domain(), (10.0, 10_000.0));
    let svg = plot.to_svg();
    let doc = parse(&svg);
    let got = points_of(&doc, "normal <read>");
    assert_eq!(got.len(), 3);
    for (g, want) in got.iter().zip(&a.points) {
        assert!(
            close(g.0, x.map(want.0)) && close(g.1, y.map(want.1)),
            "{g:?} {want:?}"
        );
    }
    // Decades are equally spaced, and 100 µs is a third of the way along.
    let (x0, x1) = x.range();
    assert!(close(got[1].0, x0 + (x1 - x0) / 3.0));
    // The fraction axis: 1.0 at the top of the plot box, 0 at its bottom.
    assert!(close(got[2].1, plot.frame.top));
    assert!(close(y.map(0.0), plot.frame.height - plot.frame.bottom));
    // Tick labels 10, 100, 1k, 10k and the escaped title.
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    for t in ["10", "100", "1k", "10k", "reads & writes", "p99"] {
        assert!(texts.contains(&t), "{t} missing from {texts:?}");
    }
}

#[test]
fn cdf_from_histogram_counts_every_value() {
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    for _ in 0..9 {
        h.record(200_000).unwrap(); // 200 µs
    }
    h.record(4_000_000).unwrap(); // 4 ms
    let s = CdfSeries::from_histogram_ns("h", &h);
    assert_eq!(s.points.len(), 2);
    assert!((s.points[0].0 - 200.0).abs() < 0.5 && s.points[0].1 == 0.9);
    assert!((s.points[1].0 - 4000.0).abs() < 4.0 && s.points[1].1 == 1.0);
}

#[test]
fn cdf_thins_close_points_but_keeps_the_last() {
    let lat: Vec<f64> = (0..1000).map(|i| 100.0 + i as f64 * 0.01).collect();
    let s = CdfSeries::from_latencies_us("t", &lat);
    assert!(s.points.len() < 20, "{}", s.points.len());
    assert_eq!(s.points.last().unwrap().1, 1.0);
    assert!(s
        .points
        .windows(2)
        .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
}

#[test]
fn timeline_marks_events_where_the_time_axis_says() {
    let tput = Series::new(
        "ops/s",
        (0..=20)
            .map(|t| (t as f64, 1000.0 + 10.0 * t as f64))
            .collect(),
    );
    let p99 = Series::new("p99 µs", (0..=20).map(|t| (t as f64, 2000.0)).collect());
    let mut tl = Timeline::new(
        "YCSB-A",
        vec![
            TimelinePanel {
                y_label: "throughput (ops/s)".into(),
                series: vec![tput.clone()],
            },
            TimelinePanel {
                y_label: "p99 (µs)".into(),
                series: vec![p99],
            },
        ],
    );
    tl.events = vec![
        Event {
            t: 5.0,
            label: "node 3 killed".into(),
        },
        Event {
            t: 5.5,
            label: "node 3 restarted".into(),
        },
        Event {
            t: 15.0,
            label: "recovered".into(),
        },
    ];
    tl.bands = vec![TimelineBand {
        from: 5.0,
        to: 15.0,
        label: "degraded".into(),
    }];
    let svg = tl.to_svg();
    let doc = parse(&svg);
    let x = tl.x_scale();
    assert_eq!(x.domain(), (0.0, 20.0));
    let events: Vec<_> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("event"))
        .collect();
    assert_eq!(events.len(), 3);
    let mut label_y = Vec::new();
    for (e, want) in events.iter().zip(&tl.events) {
        assert_eq!(e.attribute("data-label"), Some(want.label.as_str()));
        let line = e.children().find(|c| c.has_tag_name("line")).unwrap();
        let x1: f64 = line.attribute("x1").unwrap().parse().unwrap();
        assert!(close(x1, x.map(want.t)), "{x1} vs {}", x.map(want.t));
        let text = e.children().find(|c| c.has_tag_name("text")).unwrap();
        assert_eq!(text.text(), Some(want.label.as_str()));
        label_y.push(text.attribute("y").unwrap().parse::<f64>().unwrap());
    }
    // The two labels half a second apart would overlap: they go on different rows.
    assert_ne!(label_y[0], label_y[1]);
    assert_eq!(label_y[0], label_y[2]);
    // Throughput points on panel 0's scale, which starts at 0 and covers the maximum.
    let y0 = tl.y_scale(0);
    assert_eq!(y0.domain().0, 0.0);
    assert!(y0.domain().1 >= 1200.0);
    for (g, want) in points_of(&doc, "ops/s").iter().zip(&tput.points) {
        assert!(close(g.0, x.map(want.0)) && close(g.1, y0.map(want.1)));
    }
    // Panel 1 lies below panel 0.
    assert!(tl.y_scale(1).range().1 > y0.range().0);
    let band = doc
        .descendants()
        .find(|n| n.attribute("class") == Some("band"))
        .unwrap();
    let bx: f64 = band.attribute("x").unwrap().parse().unwrap();
    let bw: f64 = band.attribute("width").unwrap().parse().unwrap();
    assert!(close(bx, x.map(5.0)) && close(bx + bw, x.map(15.0)));
    assert!(tl.height() > 2.0 * tl.panel_height);
}

#[test]
fn bars_rise_to_their_values() {
    let chart = BarChart::new(
        "p99 by phase",
        "µs",
        vec!["read".into(), "write".into()],
        vec!["before".into(), "node down".into(), "after".into()],
        vec![vec![100.0, 250.0], vec![180.0, f64::NAN], vec![90.0, 240.0]],
    );
    let svg = chart.to_svg();
    let doc = parse(&svg);
    let y = chart.y_scale();
    assert_eq!(y.domain(), (0.0, 250.0));
    let bars: Vec<_> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("bar"))
        .collect();
    assert_eq!(bars.len(), 5, "the NaN bar is left out");
    let base = y.map(0.0);
    for b in &bars {
        let v: f64 = b.attribute("data-value").unwrap().parse().unwrap();
        let top: f64 = b.attribute("y").unwrap().parse().unwrap();
        let h: f64 = b.attribute("height").unwrap().parse().unwrap();
        assert!(close(top, y.map(v)) && close(top + h, base), "{v}");
    }
    let write_after = bars
        .iter()
        .find(|b| {
            b.attribute("data-series") == Some("write")
                && b.attribute("data-group") == Some("after")
        })
        .unwrap();
    let bx: f64 = write_after.attribute("x").unwrap().parse().unwrap();
    assert!(close(bx, chart.bar_x(2, 1).0));
    // Groups left to right, series side by side inside a group.
    assert!(chart.bar_x(0, 1).0 > chart.bar_x(0, 0).0 && chart.bar_x(1, 0).0 > chart.bar_x(0, 1).0);
}

#[test]
fn negative_bars_hang_below_the_zero_line_inside_the_frame() {
    let chart = BarChart::new(
        "coherent over incoherent",
        "%",
        vec!["A".into(), "C".into()],
        vec!["rs".into(), "lrc".into()],
        vec![vec![28.0, 57.0], vec![-23.0, 12.0]],
    );
    let y = chart.y_scale();
    let (lo, hi) = y.domain();
    assert!(lo <= -23.0 && lo > -50.0, "low end {lo}");
    assert!(hi >= 57.0, "high end {hi}");
    let svg = chart.to_svg();
    let doc = parse(&svg);
    let base = y.map(0.0);
    let bottom = y.map(lo);
    for b in doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("bar"))
    {
        let v: f64 = b.attribute("data-value").unwrap().parse().unwrap();
        let top: f64 = b.attribute("y").unwrap().parse().unwrap();
        let h: f64 = b.attribute("height").unwrap().parse().unwrap();
        assert!(close(h, (y.map(v) - base).abs()), "{v}");
        if v < 0.0 {
            // Hangs from the zero line, and its end is inside the frame.
            assert!(close(top, base) && top + h <= bottom + 1e-6, "{v}");
        } else {
            assert!(close(top + h, base), "{v}");
        }
    }
}

#[test]
fn page_embeds_svgs_and_tables() {
    let mut t = Table::new(["phase", "ops/s", "p99 µs"]);
    t.row(["before", "8,348", "4,653"])
        .row(["node <3> down", "7,010", "5,460"]);
    let plot = CdfPlot::new("cdf", vec![CdfSeries::from_latencies_us("x", &[1.0, 2.0])]);
    let mut page = Page::new("inec demo & report");
    page.heading(1, "inec demo")
        .paragraph("a < b")
        .table(t.clone())
        .svg(format!("<?xml version=\"1.0\"?>\n{}", plot.to_svg()))
        .pre("x & y");
    let html = page.to_html();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("<title>inec demo &amp; report</title>"));
    assert!(html.contains("<td>node &lt;3&gt; down</td>"));
    assert!(html.contains("<td class=\"num\">8,348</td>"));
    assert!(!html.contains("<?xml"));
    // The embedded SVG is whole and well-formed.
    let start = html.find("<svg").unwrap();
    let end = html.find("</svg>").unwrap() + "</svg>".len();
    parse(&html[start..end]);
    // The table round-trips through Markdown.
    let md = t.to_markdown();
    assert!(md.lines().nth(1).unwrap().contains("---:"), "{md}");
    assert_eq!(Table::from_markdown(&md), t);
    let dir = std::env::temp_dir().join(format!("inec-report-test-{}", std::process::id()));
    let path = dir.join("sub/index.html");
    page.write(&path).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), html);
    std::fs::remove_dir_all(&dir).unwrap();
}
