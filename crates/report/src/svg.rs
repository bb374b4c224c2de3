//! A minimal SVG text builder: elements with escaped attributes and text.

use std::fmt::Write as _;

/// Escapes `& < > " '` for XML text and attribute values.
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c => o.push(c),
        }
    }
    o
}

/// Numbers as SVG wants them: short, no exponent.
pub(crate) fn num(v: f64) -> String {
    if !v.is_finite() {
        return "0".into();
    }
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// An SVG document being written.
#[derive(Debug)]
pub(crate) struct Doc {
    out: String,
}

impl Doc {
    pub fn new(width: f64, height: f64, title: &str) -> Doc {
        let mut out = String::new();
        let _ = write!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">"#,
            w = num(width),
            h = num(height)
        );
        let _ = write!(out, "<title>{}</title>", escape(title));
        let _ = write!(
            out,
            r#"<rect x="0" y="0" width="{}" height="{}" fill="white"/>"#,
            num(width),
            num(height)
        );
        Doc { out }
    }

    /// An element with attributes and no content.
    pub fn empty(&mut self, name: &str, attrs: &[(&str, String)]) {
        self.open_tag(name, attrs);
        self.out.push_str("/>");
    }

    pub fn open(&mut self, name: &str, attrs: &[(&str, String)]) {
        self.open_tag(name, attrs);
        self.out.push('>');
    }

    pub fn close(&mut self, name: &str) {
        let _ = write!(self.out, "</{name}>");
    }

    fn open_tag(&mut self, name: &str, attrs: &[(&str, String)]) {
        let _ = write!(self.out, "<{name}");
        for (k, v) in attrs {
            let _ = write!(self.out, r#" {k}="{}""#, escape(v));
        }
    }

    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, style: &str) {
        let _ = write!(
            self.out,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" {style}/>"#,
            num(x1),
            num(y1),
            num(x2),
            num(y2)
        );
    }

    pub fn text(&mut self, x: f64, y: f64, anchor: &str, extra: &str, text: &str) {
        let _ = write!(
            self.out,
            r#"<text x="{}" y="{}" text-anchor="{anchor}" {extra}>{}</text>"#,
            num(x),
            num(y),
            escape(text)
        );
    }

    pub fn finish(mut self) -> String {
        self.out.push_str("</svg>\n");
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape(r#"a<b & "c" 'd'>"#),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;"
        );
        assert_eq!(num(1.0), "1");
        assert_eq!(num(2.345), "2.35");
        assert_eq!(num(-0.001), "0");
        assert_eq!(num(f64::NAN), "0");
    }
}
