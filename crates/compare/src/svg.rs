//! SVG charts in the style of the papers' figures, drawn with `plotters` (its SVG backend,
//! default features off: text is SVG `<text>`, laid out by plotters' built-in estimate, so no
//! font library or fontconfig is needed). Line charts plot x against y, one line per design,
//! either axis optionally logarithmic; grouped bar charts have one group per category and one
//! bar per design. Points that are not finite (or not positive on a log axis) are left out.
//! Output is deterministic.

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

const SIZE: (u32, u32) = (640, 400);
/// Room right of the plot for the legend.
const LEGEND_WIDTH: u32 = 170;
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
];

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

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Draws into an SVG string; a chart that cannot be drawn says why in its place.
fn render(draw: impl FnOnce(&Area) -> DrawResult) -> String {
    let mut out = String::new();
    let result = {
        let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| e.into())
            .and_then(|()| draw(&root))
            .and_then(|()| root.present().map_err(|e| e.into()))
    };
    match result {
        Ok(()) => out,
        Err(e) => format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\"><text x=\"10\" y=\"20\">chart not drawn: {}</text></svg>\n",
            SIZE.0,
            SIZE.1,
            escape(&e.to_string())
        ),
    }
}

/// The plotted range of `values`: from 0 (linear axes that start at zero) or the smallest
/// value, to the largest with a margin; positive values only on a log axis.
fn range(values: impl Iterator<Item = f64>, log: bool, from_zero: bool) -> (f64, f64) {
    let finite: Vec<f64> = values
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .collect();
    let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    match (log, finite.is_empty()) {
        (_, true) => (if log { 0.1 } else { 0.0 }, 1.0),
        (true, false) => (lo / 1.3, hi * 1.3),
        (false, false) => {
            let lo = if from_zero { lo.min(0.0) } else { lo };
            let span = if hi > lo { hi - lo } else { hi.abs().max(1.0) };
            (lo, hi + span * 0.08)
        }
    }
}

/// A tick label: no trailing zeros, thousands without decimals.
fn fmt_num(v: f64) -> String {
    let text = if v.abs() >= 1000.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// How a legend entry shows its series.
#[derive(Clone, Copy)]
enum Swatch {
    Line,
    Bar,
}

/// The legend, drawn on the whole figure in the room right of the plot (`plot_right`, `top`
/// in pixels): one swatch and name per series.
fn legend(
    root: &Area,
    plot_right: i32,
    top: i32,
    entries: &[(&str, RGBColor)],
    swatch: Swatch,
) -> DrawResult {
    for (i, (name, color)) in entries.iter().enumerate() {
        let (x, y) = (plot_right + 14, top + 8 + 18 * i as i32);
        match swatch {
            Swatch::Line => {
                root.draw(&PathElement::new(
                    vec![(x, y), (x + 18, y)],
                    color.stroke_width(2),
                ))?;
                root.draw(&Circle::new((x + 9, y), 3, color.stroke_width(1)))?;
            }
            Swatch::Bar => root.draw(&Rectangle::new(
                [(x + 3, y - 5), (x + 15, y + 5)],
                color.filled(),
            ))?,
        }
        root.draw(&Text::new(
            name.to_string(),
            (x + 24, y),
            ("sans-serif", 12)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
    }
    Ok(())
}

/// The plot's right edge and top, in pixels of the whole figure.
fn plot_corner<X: Ranged, Y: Ranged>(
    chart: &ChartContext<SVGBackend, Cartesian2d<X, Y>>,
) -> (i32, i32) {
    let (xs, ys) = chart.plotting_area().get_pixel_range();
    (xs.end, ys.start)
}

fn plotted(p: &(f64, f64), log_x: bool, log_y: bool) -> bool {
    p.0.is_finite() && p.1.is_finite() && (!log_x || p.0 > 0.0) && (!log_y || p.1 > 0.0)
}

impl LineChart {
    pub fn to_svg(&self) -> String {
        let xs = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0));
        let ys = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1));
        let (x0, x1) = range(xs, self.log_x, false);
        let (y0, y1) = range(ys, self.log_y, true);
        // A log x axis is labelled at the data's own x values (32, 64, 128 pages...).
        let mut keys: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .filter(|x| x.is_finite() && *x > 0.0)
            .collect();
        keys.sort_by(f64::total_cmp);
        keys.dedup();
        let log_x = || (x0..x1).log_scale().with_key_points(keys.clone());
        render(|root| match (self.log_x, self.log_y) {
            (false, false) => self.draw(root, x0..x1, y0..y1),
            (true, false) => self.draw(root, log_x(), y0..y1),
            (false, true) => self.draw(root, x0..x1, (y0..y1).log_scale()),
            (true, true) => self.draw(root, log_x(), (y0..y1).log_scale()),
        })
    }

    fn draw<X, Y>(&self, root: &Area, x: X, y: Y) -> DrawResult
    where
        X: AsRangedCoord<Value = f64>,
        Y: AsRangedCoord<Value = f64>,
        X::CoordDescType: ValueFormatter<f64> + Ranged<ValueType = f64>,
        Y::CoordDescType: ValueFormatter<f64> + Ranged<ValueType = f64>,
    {
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, ("sans-serif", 16))
            .margin(12)
            .margin_right(LEGEND_WIDTH)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x, y)?;
        chart
            .configure_mesh()
            .x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .x_label_formatter(&|v| fmt_num(*v))
            .y_label_formatter(&|v| fmt_num(*v))
            .light_line_style(WHITE)
            .draw()?;
        for (i, s) in self.series.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let points: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|p| plotted(p, self.log_x, self.log_y))
                .collect();
            chart.draw_series(LineSeries::new(points, color.stroke_width(2)).point_size(3))?;
        }
        let (right, top) = plot_corner(&chart);
        let entries: Vec<(&str, RGBColor)> = self
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), PALETTE[i % PALETTE.len()]))
            .collect();
        legend(root, right, top, &entries, Swatch::Line)
    }
}

impl BarChart {
    pub fn to_svg(&self) -> String {
        render(|root| self.draw(root))
    }

    fn draw(&self, root: &Area) -> DrawResult {
        let groups = self.categories.len().max(1);
        let (y0, y1) = range(self.values.iter().flatten().copied(), false, true);
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, ("sans-serif", 16))
            .margin(12)
            .margin_right(LEGEND_WIDTH)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..groups as f64, y0..y1)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(self.y_label.as_str())
            .y_label_formatter(&|v| fmt_num(*v))
            .light_line_style(WHITE)
            .draw()?;
        let bar = 0.8 / self.series.len().max(1) as f64;
        for (s, name) in self.series.iter().enumerate() {
            let color = PALETTE[s % PALETTE.len()];
            let bars = (0..self.categories.len()).filter_map(|c| {
                let v = self.values.get(s)?.get(c).copied()?;
                let left = c as f64 + 0.1 + s as f64 * bar;
                v.is_finite().then(|| {
                    Rectangle::new(
                        [(left, 0f64.max(y0)), (left + bar * 0.95, v)],
                        color.filled(),
                    )
                })
            });
            chart
                .draw_series(bars)?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
        }
        for (c, category) in self.categories.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(c as f64 + 0.5, 0f64.max(y0)));
            root.draw(&Text::new(
                category.clone(),
                (px, py + 8),
                ("sans-serif", 13)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Center, VPos::Top)),
            ))?;
        }
        let (right, top) = plot_corner(&chart);
        let entries: Vec<(&str, RGBColor)> = self
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.as_str(), PALETTE[i % PALETTE.len()]))
            .collect();
        legend(root, right, top, &entries, Swatch::Bar)
    }
}

/// Text for SVG or XML.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_chart() -> LineChart {
        LineChart {
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
        }
    }

    #[test]
    fn charts_are_well_formed_and_deterministic() {
        let chart = line_chart();
        let svg = chart.to_svg();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{svg}"
        );
        assert!(svg.contains("Latency &lt;vs&gt; size") && svg.contains("B&amp;C"));
        assert!(!svg.contains("NaN") && !svg.contains("chart not drawn"));
        assert_eq!(svg, chart.to_svg());
        let bars = BarChart {
            title: "TPS".into(),
            y_label: "normalised".into(),
            categories: vec!["fileserver".into(), "tpcc".into()],
            series: vec!["mobius".into(), "dftl".into()],
            values: vec![vec![1.5, 1.2], vec![1.0, f64::NAN]],
        };
        let svg = bars.to_svg();
        assert!(svg.contains("fileserver") && svg.contains("tpcc") && svg.contains("dftl"));
        assert!(!svg.contains("NaN") && !svg.contains("chart not drawn"));
    }

    #[test]
    fn every_axis_kind_draws_and_empty_or_degenerate_data_is_not_an_error() {
        for (log_x, log_y) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut chart = line_chart();
            chart.log_x = log_x;
            chart.log_y = log_y;
            let svg = chart.to_svg();
            assert!(!svg.contains("chart not drawn"), "{log_x} {log_y}: {svg}");
        }
        let mut empty = line_chart();
        empty.series.clear();
        assert!(!empty.to_svg().contains("chart not drawn"));
        let mut flat = line_chart();
        flat.series = vec![Series {
            name: "one".into(),
            points: vec![(5.0, 3.0)],
        }];
        assert!(!flat.to_svg().contains("chart not drawn"));
    }

    #[test]
    fn tick_labels_drop_trailing_zeros() {
        assert_eq!(fmt_num(100.0), "100");
        assert_eq!(fmt_num(2.5), "2.5");
        assert_eq!(fmt_num(12.25), "12.2");
        assert_eq!(fmt_num(0.125), "0.125");
        assert_eq!(fmt_num(12345.6), "12346");
    }

    #[test]
    fn ranges_cover_the_data_and_skip_what_cannot_be_plotted() {
        let (lo, hi) = range([2.0, 97.0, f64::NAN].into_iter(), false, true);
        assert!(lo == 0.0 && hi > 97.0);
        let (lo, hi) = range([-1.0, 0.0, 10.0, 1000.0].into_iter(), true, false);
        assert!(lo > 0.0 && lo < 10.0 && hi > 1000.0, "log range {lo}..{hi}");
    }
}
