//! SVG charts written by hand: plain shapes, axes and labels, no script, so they open in
//! any browser and diff as text.

use std::fmt::Write;

use crate::stats::Report;

const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

const FAMILY: &str = "font-family=\"sans-serif\"";
const FONT: &str = "font-family=\"sans-serif\" font-size=\"12\"";

fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A duration in µs as a short label: 850 µs, 1.2 ms, 3 s.
fn time_label(us: f64) -> String {
    if us >= 1e6 {
        format!("{} s", trim(us / 1e6))
    } else if us >= 1e3 {
        format!("{} ms", trim(us / 1e3))
    } else {
        format!("{} µs", trim(us))
    }
}

fn trim(v: f64) -> String {
    if v >= 100.0 || v.fract() == 0.0 {
        return format!("{v:.0}");
    }
    let s = if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn count_label(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if v >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

/// A step of 1, 2 or 5 × 10^k giving about five ticks up to `max`.
fn nice_step(max: f64) -> f64 {
    if max <= 0.0 {
        return 1.0;
    }
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let n = raw / mag;
    mag * if n <= 1.0 {
        1.0
    } else if n <= 2.0 {
        2.0
    } else if n <= 5.0 {
        5.0
    } else {
        10.0
    }
}

/// Maps values to pixels along one axis, linear or logarithmic.
#[derive(Clone, Copy)]
struct Scale {
    lo: f64,
    hi: f64,
    log: bool,
    px_lo: f64,
    px_hi: f64,
}

impl Scale {
    fn linear(max: f64, px_lo: f64, px_hi: f64) -> Scale {
        let step = nice_step(max);
        let hi = (max / step).ceil().max(1.0) * step;
        Scale {
            lo: 0.0,
            hi,
            log: false,
            px_lo,
            px_hi,
        }
    }

    /// Whole decades around the positive values.
    fn log(min: f64, max: f64, px_lo: f64, px_hi: f64) -> Scale {
        let lo = 10f64.powf(min.max(0.1).log10().floor());
        let mut hi = 10f64.powf(max.max(0.1).log10().ceil());
        if hi <= lo {
            hi = lo * 10.0;
        }
        Scale {
            lo,
            hi,
            log: true,
            px_lo,
            px_hi,
        }
    }

    fn px(&self, v: f64) -> f64 {
        let f = if self.log {
            (v.max(self.lo).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        self.px_lo + f.clamp(0.0, 1.0) * (self.px_hi - self.px_lo)
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let mut t = Vec::new();
            let mut v = self.lo;
            while v <= self.hi * 1.0001 {
                t.push(v);
                v *= 10.0;
            }
            t
        } else {
            let step = nice_step(self.hi);
            (0..)
                .map(|i| i as f64 * step)
                .take_while(|v| *v <= self.hi * 1.0001)
                .collect()
        }
    }
}

/// Draws the frame of a plot: horizontal grid lines with labels, x tick labels, titles.
struct Frame<'a> {
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    title: &'a str,
    y_title: &'a str,
    x_title: &'a str,
}

impl Frame<'_> {
    fn draw(&self, out: &mut String, y: &Scale, y_label: &dyn Fn(f64) -> String) {
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" {FAMILY} font-size=\"14\" font-weight=\"bold\">{}</text>",
            self.left,
            self.top - 12.0,
            escape(self.title)
        );
        for t in y.ticks() {
            let py = y.px(t);
            let _ = writeln!(
                out,
                "<line x1=\"{:.1}\" y1=\"{py:.1}\" x2=\"{:.1}\" y2=\"{py:.1}\" stroke=\"#ddd\"/>",
                self.left, self.right
            );
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} text-anchor=\"end\">{}</text>",
                self.left - 6.0,
                py + 4.0,
                escape(&y_label(t))
            );
        }
        let _ = writeln!(
            out,
            "<line x1=\"{l:.1}\" y1=\"{t:.1}\" x2=\"{l:.1}\" y2=\"{b:.1}\" stroke=\"#333\"/>\n<line x1=\"{l:.1}\" y1=\"{b:.1}\" x2=\"{r:.1}\" y2=\"{b:.1}\" stroke=\"#333\"/>",
            l = self.left,
            t = self.top,
            b = self.bottom,
            r = self.right
        );
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} text-anchor=\"middle\">{}</text>",
            (self.left + self.right) / 2.0,
            self.bottom + 36.0,
            escape(self.x_title)
        );
        let _ = writeln!(
            out,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" {FONT} text-anchor=\"middle\" transform=\"rotate(-90 {x:.1} {y:.1})\">{}</text>",
            escape(self.y_title),
            x = self.left - 66.0,
            y = (self.top + self.bottom) / 2.0
        );
    }
}

fn legend(out: &mut String, names: &[&str], x: f64, y: f64) {
    let mut px = x;
    for (i, name) in names.iter().enumerate() {
        let _ = writeln!(
            out,
            "<rect x=\"{px:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\" {FONT}>{}</text>",
            y - 10.0,
            color(i),
            px + 16.0,
            y,
            escape(name)
        );
        px += 28.0 + 7.0 * name.chars().count() as f64;
    }
}

fn header(width: f64, height: f64) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    )
}

/// Latency percentiles per target: a group of bars per percentile, one bar per target,
/// on a logarithmic axis (percentiles span orders of magnitude).
pub fn latency_chart(reports: &[Report]) -> String {
    let labels = ["p50", "p90", "p99", "p99.9", "max"];
    let values: Vec<[f64; 5]> = reports
        .iter()
        .map(|r| {
            let p = &r.latency_us;
            [p.p50, p.p90, p.p99, p.p999, p.max]
        })
        .collect();
    let positive = values.iter().flatten().copied().filter(|v| *v > 0.0);
    let min = positive.clone().fold(f64::INFINITY, f64::min);
    let max = positive.fold(0.0, f64::max);
    let (min, max) = if max > 0.0 { (min, max) } else { (1.0, 10.0) };
    let (width, height) = (760.0, 440.0);
    let frame = Frame {
        left: 96.0,
        right: width - 20.0,
        top: 60.0,
        bottom: height - 60.0,
        title: "Latency percentiles",
        y_title: "latency (log scale)",
        x_title: "percentile",
    };
    let y = Scale::log(min, max, frame.bottom, frame.top);
    let mut out = header(width, height);
    frame.draw(&mut out, &y, &time_label);
    let group = (frame.right - frame.left) / labels.len() as f64;
    let n = reports.len().max(1) as f64;
    let bar = (group * 0.8 / n).min(60.0);
    for (g, label) in labels.iter().enumerate() {
        let gx = frame.left + group * g as f64 + (group - bar * n) / 2.0;
        for (i, v) in values.iter().enumerate() {
            let x = gx + bar * i as f64;
            let top = y.px(v[g]);
            let _ = writeln!(
                out,
                "<rect x=\"{x:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}: {} {:.1} µs</title></rect>",
                bar - 2.0,
                (frame.bottom - top).max(0.0),
                color(i),
                escape(&reports[i].meta.name),
                label,
                v[g]
            );
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" {FAMILY} font-size=\"10\" text-anchor=\"middle\">{}</text>",
                x + (bar - 2.0) / 2.0,
                top - 3.0,
                escape(&time_label(v[g]))
            );
        }
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} text-anchor=\"middle\">{label}</text>",
            frame.left + group * (g as f64 + 0.5),
            frame.bottom + 18.0
        );
    }
    let names: Vec<&str> = reports.iter().map(|r| r.meta.name.as_str()).collect();
    legend(&mut out, &names, frame.left + 200.0, 30.0);
    out.push_str("</svg>\n");
    out
}

/// A rate sweep: achieved rate, p99 latency and errors against the offered rate, one line
/// per target. `points` holds every run, each naming its target and offered rate.
pub fn sweep_chart(points: &[Report]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for p in points {
        if !names.contains(&p.meta.name.as_str()) {
            names.push(&p.meta.name);
        }
    }
    let unit = if points.first().is_some_and(|p| p.meta.mode == "conn-rate") {
        "connections/s"
    } else {
        "requests/s"
    };
    let offered_max = points
        .iter()
        .filter_map(|p| p.meta.offered_rate)
        .fold(0.0, f64::max);
    let errors_per_s = |p: &Report| {
        if p.duration_s > 0.0 {
            p.errors.total as f64 / p.duration_s
        } else {
            0.0
        }
    };
    type Metric<'a> = (&'a str, &'a str, bool, Box<dyn Fn(&Report) -> f64 + 'a>);
    let panels: [Metric; 3] = [
        (
            "Achieved rate",
            "replies/s",
            false,
            Box::new(|p: &Report| p.rps),
        ),
        (
            "p99 latency",
            "latency (log scale)",
            true,
            Box::new(|p: &Report| p.latency_us.p99),
        ),
        ("Errors", "errors/s", false, Box::new(errors_per_s)),
    ];
    let (width, panel_h) = (760.0, 300.0);
    let height = 50.0 + panel_h * 3.0;
    let mut out = header(width, height);
    legend(&mut out, &names, 96.0, 24.0);
    for (k, (title, y_title, log, metric)) in panels.iter().enumerate() {
        let top = 50.0 + panel_h * k as f64 + 40.0;
        let frame = Frame {
            left: 96.0,
            right: width - 20.0,
            top,
            bottom: top + panel_h - 100.0,
            title,
            y_title,
            x_title: &format!("offered {unit}"),
        };
        let x = Scale::linear(offered_max, frame.left, frame.right);
        let values: Vec<f64> = points.iter().map(metric).collect();
        let vmax = values.iter().copied().fold(0.0, f64::max);
        let y = if *log {
            let vmin = values
                .iter()
                .copied()
                .filter(|v| *v > 0.0)
                .fold(f64::INFINITY, f64::min);
            Scale::log(
                if vmin.is_finite() { vmin } else { 1.0 },
                vmax.max(1.0),
                frame.bottom,
                frame.top,
            )
        } else {
            Scale::linear(
                vmax.max(if k == 0 { offered_max } else { 1.0 }),
                frame.bottom,
                frame.top,
            )
        };
        if *log {
            frame.draw(&mut out, &y, &time_label);
        } else {
            frame.draw(&mut out, &y, &count_label);
        }
        for t in x.ticks() {
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" {FONT} text-anchor=\"middle\">{}</text>",
                x.px(t),
                frame.bottom + 16.0,
                count_label(t)
            );
        }
        if k == 0 {
            // What a server that keeps up would achieve.
            let _ = writeln!(
                out,
                "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#999\" stroke-dasharray=\"4 4\"/>",
                x.px(0.0),
                y.px(0.0),
                x.px(x.hi),
                y.px(x.hi)
            );
        }
        for (i, name) in names.iter().enumerate() {
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.meta.name == *name)
                .map(|p| (x.px(p.meta.offered_rate.unwrap_or(0.0)), y.px(metric(p))))
                .collect();
            let path: Vec<String> = pts.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect();
            let _ = writeln!(
                out,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>",
                path.join(" "),
                color(i)
            );
            for (a, b) in pts {
                let _ = writeln!(
                    out,
                    "<circle cx=\"{a:.1}\" cy=\"{b:.1}\" r=\"3\" fill=\"{}\"/>",
                    color(i)
                );
            }
        }
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_and_labels() {
        assert_eq!(nice_step(1000.0), 200.0);
        assert_eq!(nice_step(7.0), 2.0);
        let s = Scale::log(35.0, 4200.0, 100.0, 0.0);
        assert_eq!(s.ticks(), vec![10.0, 100.0, 1000.0, 10000.0]);
        assert_eq!(s.px(10.0), 100.0);
        assert_eq!(s.px(10000.0), 0.0);
        assert_eq!(time_label(850.0), "850 µs");
        assert_eq!(time_label(1200.0), "1.2 ms");
        assert_eq!(time_label(2_000_000.0), "2 s");
        assert_eq!(count_label(25000.0), "25k");
        assert_eq!(escape("a<b&c"), "a&lt;b&amp;c");
    }
}
