//! Small SVG plots drawn by hand for the benchmark report: two axes with round ticks,
//! lines, marks, a legend. Plain text out, so the report needs no plotting crate.

use std::fmt::Write as _;

/// Series colours, in order (Okabe–Ito: told apart by colour-blind readers too).
pub const PALETTE: [&str; 6] = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"];

const WIDTH: f64 = 860.0;
const HEIGHT: f64 = 400.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 56.0;
/// Width of one character of the 12 px sans-serif text, roughly, to size the margins.
const CHAR: f64 = 6.8;
/// How many round ticks an axis aims at.
const TICKS: usize = 6;

/// Where an axis puts its ticks.
#[derive(Debug, Clone, PartialEq)]
pub enum Ticks {
    /// Round numbers (steps of 1, 2 or 5 × 10^k).
    Round,
    /// These labels at these values (categories).
    Labels(Vec<(f64, String)>),
}

/// An axis: what it measures and the range shown.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// The axis title.
    pub label: String,
    /// Value at the origin.
    pub min: f64,
    /// Value at the far end.
    pub max: f64,
    /// Its ticks.
    pub ticks: Ticks,
}

impl Axis {
    /// An axis over `min..max` with round ticks; an empty or invalid range becomes one
    /// unit wide so that nothing divides by zero.
    pub fn new(label: &str, min: f64, max: f64) -> Axis {
        let min = if min.is_finite() { min } else { 0.0 };
        let max = if max.is_finite() && max > min { max } else { min + 1.0 };
        Axis { label: label.into(), min, max, ticks: Ticks::Round }
    }

    /// An axis over `min..max` showing `labels` instead of numbers.
    pub fn labelled(label: &str, min: f64, max: f64, labels: Vec<(f64, String)>) -> Axis {
        Axis { ticks: Ticks::Labels(labels), ..Axis::new(label, min, max) }
    }

    /// The ticks to draw: (value, text).
    fn tick_marks(&self) -> Vec<(f64, String)> {
        match &self.ticks {
            Ticks::Labels(l) => l.clone(),
            Ticks::Round => {
                let ticks = round_ticks(self.min, self.max, TICKS);
                let step = ticks.windows(2).map(|w| w[1] - w[0]).next().unwrap_or(1.0);
                ticks.into_iter().map(|v| (v, tick_label(v, step))).collect()
            }
        }
    }

    /// Where `v` falls, from 0 (min) to 1 (max); clamped, and 0 for a non-finite `v`.
    fn fraction(&self, v: f64) -> f64 {
        let f = (v - self.min) / (self.max - self.min);
        if f.is_finite() { f.clamp(0.0, 1.0) } else { 0.0 }
    }
}

/// Round values covering `min..=max`, about `target` of them, in steps of 1, 2 or 5 × 10^k.
pub fn round_ticks(min: f64, max: f64, target: usize) -> Vec<f64> {
    let span = max - min;
    if !span.is_finite() || span <= 0.0 || target == 0 {
        return vec![if min.is_finite() { min } else { 0.0 }];
    }
    let raw = span / target as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let first = (min / step).ceil() as i64;
    let last = (max / step + 1e-9).floor() as i64;
    // Multiplying the index, not adding steps, keeps 0.1 + 0.2 noise out of the labels.
    (first..=last).map(|i| i as f64 * step).map(|v| if v == 0.0 { 0.0 } else { v }).collect()
}

/// `v` as a tick label: as many decimals as `step` needs, no more.
pub fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step > 0.0 && step < 1.0 { (-step.log10().floor()) as usize } else { 0 };
    format!("{v:.decimals$}")
}

/// Text made safe for SVG element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// How a legend entry shows its series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swatch {
    /// A short line.
    Line,
    /// A short dashed line.
    Dashed,
    /// A small block, as the marks are drawn.
    Block,
}

/// Data drawn on a plot, in data units; placed when rendered, once the margins (which
/// depend on the legend) are known.
#[derive(Debug, Clone)]
enum Item {
    Line { colour: String, points: Vec<(f64, f64)>, dots: bool },
    Marks { colour: String, points: Vec<(f64, f64)> },
    VLine { colour: String, x: f64 },
}

/// A plot being drawn: axes, then data, then the legend, rendered by [`Plot::render`].
#[derive(Debug, Clone)]
pub struct Plot {
    title: String,
    x: Axis,
    y: Axis,
    items: Vec<Item>,
    legend: Vec<(String, String, Swatch)>,
    lines: usize,
}

impl Plot {
    /// An empty plot titled `title` over the axes `x` and `y`.
    pub fn new(title: &str, x: Axis, y: Axis) -> Plot {
        Plot { title: title.into(), x, y, items: Vec::new(), legend: Vec::new(), lines: 0 }
    }

    /// Left margin: room for the longest y tick label.
    fn left(&self) -> f64 {
        let longest = self.y.tick_marks().iter().map(|(_, t)| t.chars().count()).max().unwrap_or(0);
        (longest as f64 * CHAR + 40.0).max(70.0)
    }

    /// Right margin: room for the longest legend entry.
    fn right(&self) -> f64 {
        let longest = self.legend.iter().map(|(t, _, _)| t.chars().count()).max().unwrap_or(0);
        longest as f64 * CHAR + 56.0
    }

    fn plot_width(&self) -> f64 {
        WIDTH - self.left() - self.right()
    }

    /// Pixel column of the value `x`.
    fn px(&self, x: f64) -> f64 {
        self.left() + self.x.fraction(x) * self.plot_width()
    }

    /// Pixel row of the value `y` (up is larger).
    fn py(&self, y: f64) -> f64 {
        HEIGHT - BOTTOM - self.y.fraction(y) * (HEIGHT - TOP - BOTTOM)
    }

    /// Colour of the next line series.
    fn next_colour(&self) -> &'static str {
        PALETTE[self.lines % PALETTE.len()]
    }

    /// A line through `points` (in data units), in the next palette colour, with a legend
    /// entry; with `dots`, each point is also circled.
    pub fn line(&mut self, label: &str, points: &[(f64, f64)], dots: bool) {
        let colour = self.next_colour().to_string();
        self.lines += 1;
        self.legend.push((label.into(), colour.clone(), Swatch::Line));
        self.items.push(Item::Line { colour, points: thin(points), dots });
    }

    /// A small block at each of `points` in `colour`; `label` goes in the legend once.
    pub fn marks(&mut self, label: &str, colour: &str, points: &[(f64, f64)]) {
        self.legend.push((label.into(), colour.into(), Swatch::Block));
        let points = points.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()).collect();
        self.items.push(Item::Marks { colour: colour.into(), points });
    }

    /// A dashed vertical line at `x` in `colour`, named `label` in the legend.
    pub fn vline(&mut self, label: &str, colour: &str, x: f64) {
        self.legend.push((label.into(), colour.into(), Swatch::Dashed));
        self.items.push(Item::VLine { colour: colour.into(), x });
    }

    /// The finished SVG document.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
             viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"white\"/>\n\
             <text x=\"{:.1}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
            WIDTH / 2.0,
            escape(&self.title)
        );
        self.render_axes(&mut s);
        self.render_body(&mut s);
        self.render_legend(&mut s);
        s.push_str("</svg>\n");
        s
    }

    fn render_axes(&self, s: &mut String) {
        let (x0, x1, y0, y1) = (self.left(), self.left() + self.plot_width(), HEIGHT - BOTTOM, TOP);
        for (v, t) in self.x.tick_marks() {
            let x = self.px(v);
            let _ = writeln!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{y1}\" x2=\"{x:.1}\" y2=\"{y0}\" stroke=\"#e0e0e0\"/>\
                 <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                y0 + 16.0,
                escape(&t)
            );
        }
        for (v, t) in self.y.tick_marks() {
            let y = self.py(v);
            let _ = writeln!(
                s,
                "<line x1=\"{x0:.1}\" y1=\"{y:.1}\" x2=\"{x1:.1}\" y2=\"{y:.1}\" stroke=\"#e0e0e0\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                x0 - 6.0,
                y + 4.0,
                escape(&t)
            );
        }
        let _ = writeln!(
            s,
            "<polyline points=\"{x0:.1},{y1} {x0:.1},{y0} {x1:.1},{y0}\" fill=\"none\" stroke=\"black\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n\
             <text x=\"14\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {:.1})\">{}</text>",
            (x0 + x1) / 2.0,
            HEIGHT - 14.0,
            escape(&self.x.label),
            (y0 + y1) / 2.0,
            (y0 + y1) / 2.0,
            escape(&self.y.label)
        );
    }

    fn render_body(&self, s: &mut String) {
        for item in &self.items {
            match item {
                Item::Line { colour, points, dots } => self.render_line(s, colour, points, *dots),
                Item::Marks { colour, points } => {
                    for (x, y) in points {
                        let _ = writeln!(
                            s,
                            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"2\" height=\"14\" fill=\"{colour}\"/>",
                            self.px(*x) - 1.0,
                            self.py(*y) - 7.0
                        );
                    }
                }
                Item::VLine { colour, x } => {
                    let x = self.px(*x);
                    let _ = writeln!(
                        s,
                        "<line x1=\"{x:.1}\" y1=\"{TOP}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"{colour}\" \
                         stroke-width=\"1.5\" stroke-dasharray=\"5,3\"/>",
                        HEIGHT - BOTTOM
                    );
                }
            }
        }
    }

    fn render_line(&self, s: &mut String, colour: &str, points: &[(f64, f64)], dots: bool) {
        let px: Vec<(f64, f64)> = points.iter().map(|(x, y)| (self.px(*x), self.py(*y))).collect();
        let text: Vec<String> = px.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = writeln!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"/>",
            text.join(" ")
        );
        for (x, y) in px.iter().filter(|_| dots) {
            let _ = writeln!(s, "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3.5\" fill=\"{colour}\"/>");
        }
    }

    fn render_legend(&self, s: &mut String) {
        let x = WIDTH - self.right() + 16.0;
        for (i, (label, colour, swatch)) in self.legend.iter().enumerate() {
            let y = TOP + 10.0 + i as f64 * 20.0;
            let _ = match swatch {
                Swatch::Line | Swatch::Dashed => write!(
                    s,
                    "<line x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{colour}\" \
                     stroke-width=\"2\"{}/>",
                    x + 24.0,
                    if *swatch == Swatch::Dashed { " stroke-dasharray=\"5,3\"" } else { "" }
                ),
                Swatch::Block => write!(
                    s,
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"8\" height=\"12\" fill=\"{colour}\"/>",
                    x + 8.0,
                    y - 6.0
                ),
            };
            let _ = writeln!(s, "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>", x + 30.0, y + 4.0, escape(label));
        }
    }
}

/// Drops points that add nothing visible: non-finite ones, and of each run of points
/// with the same `y` all but the first and the last (a step stays a step).
fn thin(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let all: Vec<(f64, f64)> =
        points.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()).collect();
    all.iter()
        .enumerate()
        .filter(|(i, (_, y))| {
            let prev = i.checked_sub(1).and_then(|p| all.get(p)).map(|p| p.1);
            let next = all.get(i + 1).map(|n| n.1);
            prev != Some(*y) || next != Some(*y)
        })
        .map(|(_, p)| *p)
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Checks `svg` is well formed enough to render: tags balance, every number in a
    /// coordinate attribute is finite. Returns the element names in order.
    pub(crate) fn check_svg(svg: &str) -> Vec<String> {
        let mut stack: Vec<String> = Vec::new();
        let mut names = Vec::new();
        let mut rest = svg;
        while let Some(open) = rest.find('<') {
            let close = rest[open..].find('>').expect("tag closed") + open;
            let tag = &rest[open + 1..close];
            rest = &rest[close + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(name.trim()), "unbalanced </{name}>");
                continue;
            }
            let name = tag.split_whitespace().next().expect("tag name").trim_end_matches('/').to_string();
            check_numbers(tag);
            names.push(name.clone());
            if !tag.ends_with('/') {
                stack.push(name);
            }
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "a non-finite number");
        names
    }

    fn check_numbers(tag: &str) {
        for attr in ["x", "y", "x1", "x2", "y1", "y2", "cx", "cy", "r", "width", "height", "points"] {
            let key = format!(" {attr}=\"");
            for (i, _) in tag.match_indices(&key) {
                let value = &tag[i + key.len()..];
                let value = &value[..value.find('"').expect("attribute closed")];
                for n in value.split([' ', ',']).filter(|n| !n.is_empty()) {
                    let v: f64 = n.parse().unwrap_or_else(|_| panic!("{attr}={value:?} in <{tag}>"));
                    assert!(v.is_finite(), "{attr}={value}");
                }
            }
        }
    }

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(round_ticks(0.0, 100.0, 5), vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        assert_eq!(round_ticks(-100.0, 260.0, 6), vec![-100.0, 0.0, 100.0, 200.0]);
        let small = round_ticks(0.0, 0.3, 6);
        assert_eq!(
            small.iter().map(|v| tick_label(*v, 0.05)).collect::<Vec<_>>()[..3],
            ["0.00", "0.05", "0.10"]
        );
        assert_eq!(round_ticks(5.0, 5.0, 6), vec![5.0]);
        assert_eq!(tick_label(20000.0, 5000.0), "20000");
        assert_eq!(tick_label(0.5, 0.1), "0.5");
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape("a<b & \"c\">'d'"), "a&lt;b &amp; &quot;c&quot;&gt;&apos;d&apos;");
    }

    #[test]
    fn thinning_keeps_steps_and_ends() {
        let pts = [(0.0, 0.0), (1.0, 0.0), (2.0, 0.0), (3.0, 5.0), (4.0, 5.0), (5.0, 5.0), (6.0, 9.0)];
        assert_eq!(thin(&pts), vec![(0.0, 0.0), (2.0, 0.0), (3.0, 5.0), (5.0, 5.0), (6.0, 9.0)]);
        assert!(thin(&[(f64::NAN, 1.0)]).is_empty());
    }

    #[test]
    fn a_plot_renders_every_series_and_balances() {
        let mut p = Plot::new("t <1>", Axis::new("x", 0.0, 10.0), Axis::new("y", 0.0, 0.0));
        p.line("one & only", &[(0.0, 0.0), (5.0, f64::NAN), (10.0, 1.0)], true);
        p.line("two", &[(0.0, 1.0), (10.0, 0.0)], false);
        p.marks("lost", "#c00", &[(1.0, 0.5), (f64::INFINITY, 0.5)]);
        p.vline("failure", "black", 0.0);
        let svg = p.render();
        let names = check_svg(&svg);
        assert_eq!(names.iter().filter(|n| *n == "polyline").count(), 3, "two lines and the axes");
        assert_eq!(names.iter().filter(|n| *n == "circle").count(), 2);
        for label in ["one &amp; only", "two", "lost", "failure", "t &lt;1&gt;"] {
            assert!(svg.contains(&format!(">{label}</text>")), "{label}: {svg}");
        }
    }
}
