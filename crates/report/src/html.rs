//! A standalone HTML page: headings, paragraphs, preformatted text, tables and inline SVGs,
//! with its style inside (no outside file, script or font), so it opens from anywhere.

use std::fmt::Write as _;

use super::svg::escape;

/// A table: a header row and rows of cells. Cells that parse as numbers (with optional
/// `,`, `%`, `×`, `x` or a unit after them) are right-aligned in HTML.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Table {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Table {
        self.rows.push(cells.into_iter().map(Into::into).collect());
        self
    }

    /// Reads Markdown table rows (`| a | b |`): the first row is the header, `|---|` rows
    /// are skipped, lines not starting with `|` are ignored.
    pub fn from_markdown(text: &str) -> Table {
        let mut rows: Vec<Vec<String>> = text
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with('|'))
            .map(|l| {
                let inner = l.trim_start_matches('|');
                let inner = inner.strip_suffix('|').unwrap_or(inner);
                inner.split('|').map(|c| c.trim().to_string()).collect()
            })
            .filter(|cells: &Vec<String>| {
                !cells
                    .iter()
                    .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':' | ' ')))
            })
            .collect();
        if rows.is_empty() {
            return Table::default();
        }
        let header = rows.remove(0);
        Table { header, rows }
    }

    /// The table as Markdown (numeric columns right-aligned), e.g. for a terminal or a `.md`.
    pub fn to_markdown(&self) -> String {
        let cols = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.header.len()])
            .max()
            .unwrap_or(0);
        let cell = |r: &Vec<String>, i: usize| r.get(i).cloned().unwrap_or_default();
        let width: Vec<usize> = (0..cols)
            .map(|i| {
                self.rows
                    .iter()
                    .chain([&self.header])
                    .map(|r| cell(r, i).chars().count())
                    .max()
                    .unwrap_or(0)
                    .max(3)
            })
            .collect();
        let numeric: Vec<bool> = (0..cols).map(|i| self.numeric_column(i)).collect();
        let line = |r: &Vec<String>| {
            let mut s = String::from("|");
            for i in 0..cols {
                let c = cell(r, i);
                let pad = width[i] - c.chars().count();
                if numeric[i] {
                    let _ = write!(s, " {}{} |", " ".repeat(pad), c);
                } else {
                    let _ = write!(s, " {}{} |", c, " ".repeat(pad));
                }
            }
            s.push('\n');
            s
        };
        let mut out = line(&self.header);
        out.push('|');
        for i in 0..cols {
            let dashes = "-".repeat(width[i] - usize::from(numeric[i]));
            let _ = write!(out, " {}{} |", dashes, if numeric[i] { ":" } else { "" });
        }
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
        }
        out
    }

    fn numeric_column(&self, i: usize) -> bool {
        let mut any = false;
        for r in &self.rows {
            match r.get(i).map(String::as_str) {
                None | Some("") | Some("–") | Some("-") => {}
                Some(c) if looks_numeric(c) => any = true,
                Some(_) => return false,
            }
        }
        any
    }

    fn to_html(&self, out: &mut String) {
        let cols = self.header.len();
        let numeric: Vec<bool> = (0..cols.max(1)).map(|i| self.numeric_column(i)).collect();
        out.push_str("<table>\n<thead><tr>");
        for (i, h) in self.header.iter().enumerate() {
            let cls = if numeric.get(i) == Some(&true) {
                " class=\"num\""
            } else {
                ""
            };
            let _ = write!(out, "<th{cls}>{}</th>", escape(h));
        }
        out.push_str("</tr></thead>\n<tbody>\n");
        for r in &self.rows {
            out.push_str("<tr>");
            for (i, c) in r.iter().enumerate() {
                let cls = if numeric.get(i) == Some(&true) {
                    " class=\"num\""
                } else {
                    ""
                };
                let _ = write!(out, "<td{cls}>{}</td>", escape(c));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody>\n</table>\n");
    }
}

/// `1,234`, `12.5`, `3 s`, `0.12×`, `45%`, `1.9 GiB/s`: a number first, then at most a unit.
fn looks_numeric(c: &str) -> bool {
    let c = c.trim();
    let digits: String = c
        .chars()
        .take_while(|ch| ch.is_ascii_digit() || matches!(ch, '.' | ',' | '-' | '+'))
        .collect();
    let rest = c[digits.len()..].trim();
    digits.chars().any(|ch| ch.is_ascii_digit())
        && rest.split_whitespace().count() <= 1
        && rest.chars().count() <= 8
}

#[derive(Clone, Debug)]
enum Block {
    Heading(u8, String),
    Paragraph(String),
    Pre(String),
    Svg(String),
    Table(Table),
}

/// An HTML page being put together.
#[derive(Clone, Debug)]
pub struct Page {
    title: String,
    blocks: Vec<Block>,
}

const STYLE: &str =
    "body{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:1em 0;font-size:14px}\
th,td{border:1px solid #ccc;padding:3px 8px}th{background:#f2f2f2}\
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}\
pre{background:#f6f6f6;padding:8px;overflow-x:auto}\
figure{margin:1em 0}svg{max-width:100%;height:auto}";

impl Page {
    pub fn new(title: impl Into<String>) -> Page {
        Page {
            title: title.into(),
            blocks: Vec::new(),
        }
    }

    /// A heading of level 1..=6 (clamped).
    pub fn heading(&mut self, level: u8, text: impl Into<String>) -> &mut Page {
        self.blocks
            .push(Block::Heading(level.clamp(1, 6), text.into()));
        self
    }

    pub fn paragraph(&mut self, text: impl Into<String>) -> &mut Page {
        self.blocks.push(Block::Paragraph(text.into()));
        self
    }

    pub fn pre(&mut self, text: impl Into<String>) -> &mut Page {
        self.blocks.push(Block::Pre(text.into()));
        self
    }

    /// An SVG document (as the plots write it); an XML declaration before `<svg` is dropped.
    pub fn svg(&mut self, svg: impl Into<String>) -> &mut Page {
        let s: String = svg.into();
        let s = match s.find("<svg") {
            Some(i) => s[i..].to_string(),
            None => s,
        };
        self.blocks.push(Block::Svg(s));
        self
    }

    pub fn table(&mut self, t: Table) -> &mut Page {
        self.blocks.push(Block::Table(t));
        self
    }

    pub fn to_html(&self) -> String {
        let mut out = String::new();
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
            escape(&self.title)
        );
        for b in &self.blocks {
            match b {
                Block::Heading(l, t) => {
                    let _ = writeln!(out, "<h{l}>{}</h{l}>", escape(t));
                }
                Block::Paragraph(t) => {
                    let _ = writeln!(out, "<p>{}</p>", escape(t));
                }
                Block::Pre(t) => {
                    let _ = writeln!(out, "<pre>{}</pre>", escape(t));
                }
                Block::Svg(s) => {
                    let _ = writeln!(out, "<figure>\n{}</figure>", s.trim_end());
                }
                Block::Table(t) => t.to_html(&mut out),
            }
        }
        out.push_str("</body>\n</html>\n");
        out
    }

    /// Writes the page to `path` (creating its directory).
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(path, self.to_html())
    }
}
