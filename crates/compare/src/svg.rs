//! Plain SVG charts in the style of the papers' figures: line charts (x against y, one line per
//! design, optional log-scale x) and grouped bar charts (one group per category, one bar per
//! design). No external dependencies; text is escaped; output is deterministic.

use std::fmt::Write;

const W: f64 = 640.0;
const H: f64 = 400.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const PALETTE: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];
const MARKERS: [&str; 5] = ["circle", "square", "triangle", "diamond", "cross"];

/// One named series of (x, y) points.
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A line chart.
#[derive(Clone, Debug)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub log_y: bool,
    pub series: Vec<Series>,
}

/// A grouped bar chart: `values[series][category]`.
#[derive(Clone, Debug)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    pub series: Vec<String>,
    pub values: Vec<Vec<f64>>,
}

pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn header(out: &mut String, title: &str) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="Helvetica, Arial, sans-serif" font-size="12">
<rect width="{W}" height="{H}" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="14" font-weight="bold">{}</text>
"#,
        (LEFT + W - RIGHT) / 2.0,
        escape(title)
    );
}

/// "Nice" tick values covering [lo, hi].
fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    // Also an empty or NaN range.
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        return vec![lo];
    }
    let raw = (hi - lo) / n as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let start = (lo / step).floor() * step;
    let mut v = Vec::new();
    let mut t = start;
    while t <= hi + step * 1e-9 {
        if t >= lo - step * 1e-9 {
            v.push(t);
        }
        t += step;
    }
    v
}

fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1e6 || v.abs() < 1e-2 {
        format!("{v:.1e}")
    } else if v.fract().abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
}

impl Axis {
    fn new(values: impl Iterator<Item = f64>, log: bool, zero: bool) -> Axis {
        let vals: Vec<f64> = values
            .filter(|v| v.is_finite() && (!log || *v > 0.0))
            .collect();
        let mut lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let mut hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !lo.is_finite() {
            lo = if log { 1.0 } else { 0.0 };
            hi = lo + 1.0;
        }
        if log {
            lo = 10f64.powf(lo.log10().floor());
            hi = 10f64.powf(hi.log10().ceil().max(lo.log10() + 1.0));
        } else {
            if zero {
                lo = lo.min(0.0);
            }
            if hi <= lo {
                hi = lo + 1.0;
            }
            hi += (hi - lo) * 0.05;
        }
        Axis { lo, hi, log }
    }
    fn frac(&self, v: f64) -> f64 {
        if self.log {
            (v.max(self.lo).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }
    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let mut v = Vec::new();
            let mut t = self.lo;
            while t <= self.hi * 1.0001 {
                v.push(t);
                t *= 10.0;
            }
            v
        } else {
            ticks(self.lo, self.hi, 6)
        }
    }
}

fn plot_x(f: f64) -> f64 {
    LEFT + f * (W - LEFT - RIGHT)
}
fn plot_y(f: f64) -> f64 {
    H - BOTTOM - f * (H - TOP - BOTTOM)
}

fn frame(out: &mut String, x_label: &str, y_label: &str) {
    let _ = write!(
        out,
        r#"<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="none" stroke="black"/>
<text x="{}" y="{}" text-anchor="middle">{}</text>
<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>
"#,
        W - LEFT - RIGHT,
        H - TOP - BOTTOM,
        (LEFT + W - RIGHT) / 2.0,
        H - 18.0,
        escape(x_label),
        (TOP + H - BOTTOM) / 2.0,
        (TOP + H - BOTTOM) / 2.0,
        escape(y_label)
    );
}

fn y_ticks(out: &mut String, axis: &Axis) {
    for t in axis.ticks() {
        let y = plot_y(axis.frac(t));
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            fmt_num(t)
        );
    }
}

fn legend(out: &mut String, names: &[String]) {
    for (i, name) in names.iter().enumerate() {
        let y = TOP + 10.0 + i as f64 * 18.0;
        let _ = writeln!(
            out,
            r#"<rect x="{}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{}" y="{:.1}">{}</text>"#,
            W - RIGHT + 12.0,
            y,
            PALETTE[i % PALETTE.len()],
            W - RIGHT + 30.0,
            y + 10.0,
            escape(name)
        );
    }
}

fn marker(out: &mut String, kind: &str, x: f64, y: f64, color: &str) {
    let _ = match kind {
        "square" => writeln!(
            out,
            r#"<rect x="{:.1}" y="{:.1}" width="7" height="7" fill="{color}"/>"#,
            x - 3.5,
            y - 3.5
        ),
        "triangle" => writeln!(
            out,
            r#"<polygon points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{color}"/>"#,
            x,
            y - 4.5,
            x - 4.0,
            y + 3.5,
            x + 4.0,
            y + 3.5
        ),
        "diamond" => writeln!(
            out,
            r#"<polygon points="{:.1},{:.1} {:.1},{:.1} {:.1},{:.1} {:.1},{:.1}" fill="{color}"/>"#,
            x,
            y - 5.0,
            x + 4.0,
            y,
            x,
            y + 5.0,
            x - 4.0,
            y
        ),
        "cross" => writeln!(
            out,
            r#"<path d="M{:.1},{:.1}l8,8m0,-8l-8,8" stroke="{color}" stroke-width="2"/>"#,
            x - 4.0,
            y - 4.0
        ),
        _ => writeln!(
            out,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{color}"/>"#
        ),
    };
}

impl LineChart {
    pub fn to_svg(&self) -> String {
        let mut out = String::new();
        header(&mut out, &self.title);
        let xs = Axis::new(
            self.series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.0)),
            self.log_x,
            false,
        );
        let ys = Axis::new(
            self.series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.1)),
            self.log_y,
            true,
        );
        y_ticks(&mut out, &ys);
        for t in xs.ticks() {
            let x = plot_x(xs.frac(t));
            let _ = writeln!(
                out,
                r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                H - BOTTOM + 16.0,
                fmt_num(t)
            );
        }
        frame(&mut out, &self.x_label, &self.y_label);
        for (i, s) in self.series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let pts: Vec<String> = s
                .points
                .iter()
                .filter(|p| p.0.is_finite() && p.1.is_finite())
                .map(|p| format!("{:.1},{:.1}", plot_x(xs.frac(p.0)), plot_y(ys.frac(p.1))))
                .collect();
            let _ = writeln!(
                out,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
                pts.join(" ")
            );
            for p in s
                .points
                .iter()
                .filter(|p| p.0.is_finite() && p.1.is_finite())
            {
                marker(
                    &mut out,
                    MARKERS[i % MARKERS.len()],
                    plot_x(xs.frac(p.0)),
                    plot_y(ys.frac(p.1)),
                    color,
                );
            }
        }
        legend(
            &mut out,
            &self
                .series
                .iter()
                .map(|s| s.name.clone())
                .collect::<Vec<_>>(),
        );
        out.push_str("</svg>\n");
        out
    }
}

impl BarChart {
    pub fn to_svg(&self) -> String {
        let mut out = String::new();
        header(&mut out, &self.title);
        let ys = Axis::new(self.values.iter().flatten().copied(), false, true);
        y_ticks(&mut out, &ys);
        frame(&mut out, "", &self.y_label);
        let groups = self.categories.len().max(1) as f64;
        let group_w = (W - LEFT - RIGHT) / groups;
        let bar_w = group_w * 0.8 / self.series.len().max(1) as f64;
        for (c, cat) in self.categories.iter().enumerate() {
            let gx = LEFT + c as f64 * group_w + group_w * 0.1;
            for (s, vals) in self.values.iter().enumerate() {
                let v = vals.get(c).copied().unwrap_or(f64::NAN);
                if !v.is_finite() {
                    continue;
                }
                let y0 = plot_y(ys.frac(0f64.max(ys.lo)));
                let y1 = plot_y(ys.frac(v));
                let _ = writeln!(
                    out,
                    r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                    gx + s as f64 * bar_w,
                    y1.min(y0),
                    bar_w * 0.95,
                    (y0 - y1).abs(),
                    PALETTE[s % PALETTE.len()],
                    escape(&self.series[s]),
                    fmt_num(v)
                );
            }
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                gx + group_w * 0.4,
                H - BOTTOM + 16.0,
                escape(cat)
            );
        }
        legend(&mut out, &self.series);
        out.push_str("</svg>\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_well_formed_and_deterministic() {
        let chart = LineChart {
            title: "Latency <vs> size".into(),
            x_label: "pages".into(),
            y_label: "ms".into(),
            log_x: true,
            log_y: false,
            series: vec![
                Series {
                    name: "A".into(),
                    points: vec![(32.0, 1.0), (64.0, 2.0), (256.0, 7.5)],
                },
                Series {
                    name: "B&C".into(),
                    points: vec![(32.0, 0.5), (256.0, f64::NAN)],
                },
            ],
        };
        let svg = chart.to_svg();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("Latency &lt;vs&gt; size") && svg.contains("B&amp;C"));
        assert!(!svg.contains("NaN"));
        assert_eq!(svg, chart.to_svg());
        let bars = BarChart {
            title: "TPS".into(),
            y_label: "normalised".into(),
            categories: vec!["fileserver".into(), "tpcc".into()],
            series: vec!["mobius".into(), "dftl".into()],
            values: vec![vec![1.5, 1.2], vec![1.0, f64::NAN]],
        };
        let svg = bars.to_svg();
        assert_eq!(
            svg.matches("<rect x=").count(),
            3 + 1 + 2,
            "3 bars + plot frame + 2 legend swatches"
        );
    }

    #[test]
    fn ticks_cover_the_range() {
        let t = ticks(0.0, 97.0, 6);
        assert_eq!(
            t,
            vec![0.0, 20.0, 40.0, 60.0, 80.0],
            "nice steps inside the range"
        );
        assert!(ticks(0.5, 0.5, 6).len() == 1);
    }
}
