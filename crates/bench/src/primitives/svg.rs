//! SVG figures in the manner of the paper's Figures 6–8: latency and bandwidth against chunk
//! size (log–log), one line per scheme and mode (solid coherent, dashed incoherent).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use crate::Result;

use super::Row;

const W: f64 = 640.0;
const H: f64 = 400.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

fn size_label(b: f64) -> String {
    let b = b as u64;
    if b >= 1 << 20 {
        format!("{}M", b >> 20)
    } else if b >= 1 << 10 {
        format!("{}K", b >> 10)
    } else {
        format!("{b}")
    }
}

/// One chart: `series` maps a label to (x, y) points; `dashed` labels end with "incoherent".
fn chart(title: &str, ylabel: &str, series: &BTreeMap<String, Vec<(f64, f64)>>) -> String {
    let pts: Vec<(f64, f64)> = series
        .values()
        .flatten()
        .copied()
        .filter(|p| p.1 > 0.0)
        .collect();
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = write!(
        s,
        r#"<text x="{}" y="20" text-anchor="middle" font-size="14">{title}</text>"#,
        (LEFT + W - RIGHT) / 2.0
    );
    if pts.is_empty() {
        s.push_str("</svg>");
        return s;
    }
    let (x0, x1) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |a, p| (a.0.min(p.0), a.1.max(p.0)));
    let (y0, y1) = pts
        .iter()
        .fold((f64::MAX, f64::MIN), |a, p| (a.0.min(p.1), a.1.max(p.1)));
    let (lx0, lx1) = (x0.log10(), x1.log10().max(x0.log10() + 1e-9));
    let (ly0, ly1) = (
        y0.log10().floor(),
        y1.log10().ceil().max(y0.log10().floor() + 1.0),
    );
    let px = |x: f64| LEFT + (x.log10() - lx0) / (lx1 - lx0) * (W - LEFT - RIGHT);
    let py = |y: f64| H - BOTTOM - (y.log10() - ly0) / (ly1 - ly0) * (H - TOP - BOTTOM);
    let _ = write!(
        s,
        r#"<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="none" stroke="black"/>"#,
        W - LEFT - RIGHT,
        H - TOP - BOTTOM
    );
    // Axes: decades on y, every size on x.
    let mut d = ly0;
    while d <= ly1 + 1e-9 {
        let y = py(10f64.powf(d));
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{y}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">1e{d}</text>"##,
            W - RIGHT,
            LEFT - 5.0,
            y + 4.0
        );
        d += 1.0;
    }
    let mut xs: Vec<f64> = pts.iter().map(|p| p.0).collect();
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs.dedup();
    for x in xs {
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            px(x),
            H - BOTTOM + 15.0,
            size_label(x)
        );
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">chunk size (bytes)</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        H - 12.0
    );
    let _ = write!(
        s,
        r#"<text x="15" y="{}" transform="rotate(-90 15 {})" text-anchor="middle">{ylabel}</text>"#,
        H / 2.0,
        H / 2.0
    );
    let schemes: Vec<String> = {
        let mut v: Vec<String> = series
            .keys()
            .map(|k| k.split(' ').next().unwrap_or("").to_string())
            .collect();
        v.dedup();
        v
    };
    for (i, (label, points)) in series.iter().enumerate() {
        let scheme = label.split(' ').next().unwrap_or("");
        let color = COLORS[schemes.iter().position(|s| s == scheme).unwrap_or(0) % COLORS.len()];
        let dash = if label.ends_with("incoherent") {
            r#" stroke-dasharray="5,4""#
        } else {
            ""
        };
        let path: Vec<String> = points
            .iter()
            .filter(|p| p.1 > 0.0)
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="1.8"{dash}/>"#,
            path.join(" ")
        );
        let ly = TOP + 14.0 * i as f64 + 8.0;
        let lx = W - RIGHT + 10.0;
        let _ = write!(
            s,
            r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="1.8"{dash}/><text x="{}" y="{}">{label}</text>"#,
            lx + 22.0,
            lx + 26.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Writes `<op>-<code>-latency.svg` and `<op>-<code>-bandwidth.svg` for every (op, code).
pub fn write_figures(dir: &Path, rows: &[Row]) -> Result<()> {
    let mut groups: BTreeMap<(String, String), Vec<&Row>> = BTreeMap::new();
    for r in rows {
        groups
            .entry((r.op.clone(), r.code.clone()))
            .or_default()
            .push(r);
    }
    for ((op, code), rs) in groups {
        let mut lat: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        let mut bw: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for r in rs {
            let label = format!("{} {}", r.scheme, r.mode);
            lat.entry(label.clone())
                .or_default()
                .push((r.chunk_bytes as f64, r.latency_us_p50));
            bw.entry(label)
                .or_default()
                .push((r.chunk_bytes as f64, r.bandwidth_mbps));
        }
        let name = code.replace([':', ','], "_");
        fs::write(
            dir.join(format!("{op}-{name}-latency.svg")),
            chart(&format!("{op} latency, {code}"), "latency (µs)", &lat),
        )?;
        fs::write(
            dir.join(format!("{op}-{name}-bandwidth.svg")),
            chart(&format!("{op} bandwidth, {code}"), "bandwidth (MB/s)", &bw),
        )?;
    }
    Ok(())
}
