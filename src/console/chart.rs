//! The console's charts and the MFA set-up QR code, drawn as inline SVG by toolgate itself (no
//! script, no third-party library, nothing fetched).
//!
//! The console's pages are served under `Content-Security-Policy: default-src 'none';
//! style-src 'self'; img-src 'self' data:`, so nothing here writes a `style` attribute or a
//! `<style>` element: colours and strokes are SVG presentation attributes (a sensible default
//! without any stylesheet) and every element carries a class the console's stylesheet may use:
//!
//! | class | on |
//! |---|---|
//! | `chart` | the `<figure>` around a chart |
//! | `chart-line` / `chart-bars` | the `<svg>` of a line chart / a bar chart |
//! | `chart-axis` | the two axis lines |
//! | `chart-grid` | the gridlines at each value tick |
//! | `chart-label` | the tick labels (`<text>`) on both axes and the bars' labels and values |
//! | `chart-empty` | the "No data" text of a chart with nothing to draw |
//! | `chart-legend` | the series legend (`<g>` of `<text>`) of a line chart with two series or more |
//! | `series-0` .. `series-5` | a series' line (and its legend entry), a bar; the 7th series is `series-0` again |
//! | `chart-bar` | each bar of a bar chart (with its `series-N`) |
//! | `visually-hidden` | the data `<table>` below each chart: for screen readers, hidden on screen |
//! | `qr` | the QR code's `<svg>` |
//!
//! Data rules (the same for every chart): NaN and infinite values are skipped; values beyond
//! ±1e300 are clamped to it (so an axis range never overflows); the value axis always includes 0
//! and its ticks fall on "nice" steps (1, 2 or 5 × 10^k), labelled compactly (`1.2k`, `3.4M`)
//! followed by the unit. A line chart's points are sorted by time before drawing (a series given
//! out of order is drawn as the same line as in order); a series of one point is drawn as a dot.
//! Time ticks are in UTC: `HH:MM` when the chart spans a day or less, `MM-DD` beyond.
//! Coordinates are rounded to 0.1 so a day at 5-minute resolution (3 series x 288 points) stays
//! under 30 KB with its table.
//!
//! Every text that came from outside (titles, units, series names, bar labels) is escaped; the
//! QR code's data is never written as text.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// One sample of a time series: milliseconds since the Unix epoch and its value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub t_ms: i64,
    pub v: f64,
}

/// A named series of a line chart.
#[derive(Debug, Clone, Copy)]
pub struct Series<'a> {
    pub name: &'a str,
    pub points: &'a [Point],
}

/// How many series colours the stylesheet defines (`series-0` .. `series-5`).
const SERIES_CLASSES: usize = 6;
/// The default colours of the series, used when no stylesheet applies (readable on white,
/// distinguishable with the common colour-vision deficiencies: the Okabe-Ito palette).
const SERIES_COLOURS: [&str; SERIES_CLASSES] = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9"];
/// Values beyond this magnitude are clamped, so `hi - lo` and the ticks stay finite.
const VALUE_LIMIT: f64 = 1e300;

const LINE_W: f64 = 640.0;
const LINE_H: f64 = 240.0;
const PAD_LEFT: f64 = 72.0;
const PAD_RIGHT: f64 = 16.0;
const PAD_TOP: f64 = 20.0;
const PAD_BOTTOM: f64 = 28.0;

const BAR_W: f64 = 640.0;
const BAR_ROW: f64 = 24.0;
const BAR_LABEL_W: f64 = 180.0;
/// A bar's label longer than this (in characters) is cut with an ellipsis in the SVG; the table
/// keeps it whole.
const BAR_LABEL_CHARS: usize = 26;

/// Every chart's ids are unique within the process: the page may hold several charts.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// An HTML `<figure>`: an inline `<svg>` line chart (one line per series, time on x, `unit`
/// on y) with its `<figcaption>` and, below, the same data as a `<table>` (visually hidden
/// by the class `visually-hidden` but read by screen readers).
pub fn line_chart(title: &str, unit: &str, series: &[Series<'_>]) -> String {
    let clean: Vec<Vec<(i64, f64)>> = series.iter().map(|s| clean_points(s.points)).collect();
    let id = chart_id(title);
    let count: usize = clean.iter().map(Vec::len).sum();
    let mut out = String::with_capacity(2048 + count * 40);
    let names: Vec<&str> = series.iter().map(|s| s.name).collect();
    let desc = format!(
        "Line chart of {} series over time, values in {}.",
        series.len(),
        if unit.is_empty() { "units" } else { unit }
    );
    open_figure(&mut out, &id, title, &desc, "chart-line", LINE_W, LINE_H);
    let (t_lo, t_hi) = time_range(&clean);
    let (v_ticks, v_lo, v_hi) = value_ticks(clean.iter().flatten().map(|p| p.1));
    // The legend (two series or more) has a band of its own above the plot: no line crosses it.
    let legend_band = if series.len() > 1 { legend_rows(series.len()) as f64 * LEGEND_ROW } else { 0.0 };
    let plot = Plot { x0: PAD_LEFT, x1: LINE_W - PAD_RIGHT, y0: PAD_TOP + legend_band, y1: LINE_H - PAD_BOTTOM };
    if count == 0 {
        empty_text(&mut out, LINE_W, LINE_H);
    } else {
        for &v in &v_ticks {
            let y = plot.y_of(v, v_lo, v_hi);
            let _ = write!(
                out,
                r##"<line class="chart-grid" x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/><text class="chart-label" x="{}" y="{}" text-anchor="end" font-size="11">"##,
                r1(plot.x0),
                r1(plot.x1),
                r1(plot.x0 - 6.0),
                r1(y + 4.0),
                y = r1(y),
            );
            push_escaped(&mut out, &value_label(v, unit));
            out.push_str("</text>");
        }
        let day_or_less = t_hi - t_lo <= DAY_MS as i128;
        for t in time_ticks(t_lo, t_hi) {
            let x = plot.x_of(t, t_lo, t_hi);
            let _ = write!(
                out,
                r#"<text class="chart-label" x="{}" y="{}" text-anchor="middle" font-size="11">{}</text>"#,
                r1(x),
                r1(plot.y1 + 18.0),
                time_label(t, day_or_less)
            );
        }
        axes(&mut out, &plot);
        for (i, points) in clean.iter().enumerate() {
            series_path(&mut out, i, points, &plot, (t_lo, t_hi), (v_lo, v_hi));
        }
        if series.len() > 1 {
            legend(&mut out, &names, &plot);
        }
    }
    out.push_str("</svg>");
    // Rows name the date from a whole day on: a row's HH:MM could otherwise appear twice.
    line_table(&mut out, title, unit, &names, &clean, t_hi - t_lo < DAY_MS as i128);
    out.push_str("</figure>");
    out
}

/// Horizontal bars (top functions): a `<figure>` with an inline `<svg>` and a data table.
pub fn bar_chart(title: &str, unit: &str, bars: &[(&str, f64)]) -> String {
    let clean: Vec<(&str, f64)> = bars
        .iter()
        .filter(|b| b.1.is_finite())
        .map(|&(label, v)| (label, v.clamp(-VALUE_LIMIT, VALUE_LIMIT)))
        .collect();
    let id = chart_id(title);
    let height = PAD_TOP + PAD_BOTTOM + BAR_ROW * clean.len().max(2) as f64;
    let mut out = String::with_capacity(1024 + clean.len() * 300);
    let desc =
        format!("Bar chart of {} entries, values in {}.", clean.len(), if unit.is_empty() { "units" } else { unit });
    open_figure(&mut out, &id, title, &desc, "chart-bars", BAR_W, height);
    // Room on the right for the value written after the longest bar.
    let plot = Plot { x0: BAR_LABEL_W, x1: BAR_W - 80.0, y0: PAD_TOP, y1: height - PAD_BOTTOM };
    if clean.is_empty() {
        empty_text(&mut out, BAR_W, height);
    } else {
        let (ticks, lo, hi) = value_ticks(clean.iter().map(|b| b.1));
        for &v in &ticks {
            let x = r1(plot.value_x(v, lo, hi));
            let _ = write!(
                out,
                r##"<line class="chart-grid" x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="#ddd"/><text class="chart-label" x="{x}" y="{}" text-anchor="middle" font-size="11">"##,
                r1(plot.y0),
                r1(plot.y1),
                r1(plot.y1 + 18.0),
            );
            push_escaped(&mut out, &value_label(v, unit));
            out.push_str("</text>");
        }
        let zero = plot.value_x(0.0, lo, hi);
        for (i, &(label, v)) in clean.iter().enumerate() {
            let top = plot.y0 + BAR_ROW * i as f64;
            let end = plot.value_x(v, lo, hi);
            let class = i % SERIES_CLASSES;
            let _ = write!(
                out,
                r#"<text class="chart-label" x="{}" y="{}" text-anchor="end" font-size="12">"#,
                r1(plot.x0 - 8.0),
                r1(top + BAR_ROW / 2.0 + 4.0)
            );
            push_escaped(&mut out, &shorten(label, BAR_LABEL_CHARS));
            let _ = write!(
                out,
                r#"</text><rect class="chart-bar series-{class}" x="{}" y="{}" width="{}" height="{}" fill="{}"/><text class="chart-label" x="{}" y="{}" font-size="11">"#,
                r1(zero.min(end)),
                r1(top + 4.0),
                r1((end - zero).abs()),
                r1(BAR_ROW - 8.0),
                SERIES_COLOURS[class],
                r1(zero.max(end) + 4.0),
                r1(top + BAR_ROW / 2.0 + 4.0),
            );
            push_escaped(&mut out, &value_label(v, unit));
            out.push_str("</text>");
        }
        let _ = write!(
            out,
            r##"<line class="chart-axis" x1="{z}" y1="{}" x2="{z}" y2="{}" stroke="#555"/>"##,
            r1(plot.y0),
            r1(plot.y1),
            z = r1(zero)
        );
    }
    out.push_str("</svg>");
    bar_table(&mut out, title, unit, &clean);
    out.push_str("</figure>");
    out
}

/// A QR code of `data` (an `otpauth://` URI for MFA set-up) as an inline `<svg>`: black modules
/// on a white square with the standard 4-module quiet zone, one `<path>` of horizontal runs,
/// error correction level M. Data too long for a QR code gives an `<svg>` whose title says so.
pub fn qr_svg(data: &str) -> String {
    let id = chart_id("qr");
    let code = match qrcode::QrCode::with_error_correction_level(data.as_bytes(), qrcode::EcLevel::M) {
        Ok(code) => code,
        Err(_) => {
            return format!(
                r#"<svg xmlns="http://www.w3.org/2000/svg" class="qr" role="img" aria-labelledby="{id}-t" viewBox="0 0 10 10" width="200" height="200"><title id="{id}-t">QR code unavailable: the data is too long</title></svg>"#
            )
        }
    };
    let width = code.width();
    let side = width + 8;
    let modules = code.to_colors();
    let mut out = String::with_capacity(512 + modules.len() * 4);
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" class="qr" role="img" aria-labelledby="{id}-t" viewBox="0 0 {side} {side}" width="200" height="200" shape-rendering="crispEdges"><title id="{id}-t">QR code for an authenticator app</title><rect width="{side}" height="{side}" fill="#fff"/><path fill="#000" d=""##
    );
    for (y, row) in modules.chunks(width).enumerate() {
        let mut x = 0;
        while x < width {
            if row[x] != qrcode::Color::Dark {
                x += 1;
                continue;
            }
            let start = x;
            while x < width && row[x] == qrcode::Color::Dark {
                x += 1;
            }
            let run = x - start;
            let _ = write!(out, "M{} {}h{run}v1h-{run}z", start + 4, y + 4);
        }
    }
    out.push_str(r#""/></svg>"#);
    out
}

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 60 * MINUTE_MS;
const DAY_MS: i64 = 24 * HOUR_MS;

/// The plot area, in SVG user units.
struct Plot {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

impl Plot {
    fn x_of(&self, t: i128, lo: i128, hi: i128) -> f64 {
        let span = (hi - lo) as f64;
        self.x0 + (t - lo) as f64 / span * (self.x1 - self.x0)
    }
    fn y_of(&self, v: f64, lo: f64, hi: f64) -> f64 {
        self.y1 - (v - lo) / (hi - lo) * (self.y1 - self.y0)
    }
    fn value_x(&self, v: f64, lo: f64, hi: f64) -> f64 {
        self.x0 + (v - lo) / (hi - lo) * (self.x1 - self.x0)
    }
}

/// A series' drawable points: finite values (clamped to ±`VALUE_LIMIT`), sorted by time (stable,
/// so two samples at the same time keep their order).
fn clean_points(points: &[Point]) -> Vec<(i64, f64)> {
    let mut out: Vec<(i64, f64)> =
        points.iter().filter(|p| p.v.is_finite()).map(|p| (p.t_ms, p.v.clamp(-VALUE_LIMIT, VALUE_LIMIT))).collect();
    out.sort_by_key(|p| p.0);
    out
}

/// The time axis' range (as i128: `i64::MAX - i64::MIN` does not fit an i64); a single instant
/// is widened to the minute after it, so one point sits at the left edge.
fn time_range(series: &[Vec<(i64, f64)>]) -> (i128, i128) {
    let mut lo = i128::MAX;
    let mut hi = i128::MIN;
    for &(t, _) in series.iter().flatten() {
        lo = lo.min(t as i128);
        hi = hi.max(t as i128);
    }
    if lo > hi {
        return (0, MINUTE_MS as i128);
    }
    if lo == hi {
        hi = lo + MINUTE_MS as i128;
    }
    (lo, hi)
}

/// The value axis: its ticks at a nice step and its range (the outer ticks), always holding 0.
fn value_ticks(values: impl Iterator<Item = f64>) -> (Vec<f64>, f64, f64) {
    let (mut lo, mut hi) = (0.0f64, 0.0f64);
    for v in values {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    let step = nice_step((hi - lo) / 4.0);
    let (lo, hi) = ((lo / step).floor() * step, (hi / step).ceil() * step);
    let (lo, hi) = if hi > lo { (lo, hi) } else { (0.0, step) };
    let n = ((hi - lo) / step).round().clamp(1.0, 12.0) as usize;
    let ticks = (0..=n).map(|i| lo + step * i as f64).collect();
    (ticks, lo, hi)
}

/// The smallest of 1, 2, 5 × 10^k at least `raw`; 1 when `raw` is zero or too small to scale.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 1e-290) {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    let fraction = raw / magnitude;
    let nice = if fraction <= 1.0 {
        1.0
    } else if fraction <= 2.0 {
        2.0
    } else if fraction <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// The time ticks: multiples (in UTC) of the smallest step giving at most 6 ticks.
fn time_ticks(lo: i128, hi: i128) -> Vec<i128> {
    const STEPS: [i64; 16] = [
        MINUTE_MS,
        2 * MINUTE_MS,
        5 * MINUTE_MS,
        10 * MINUTE_MS,
        15 * MINUTE_MS,
        30 * MINUTE_MS,
        HOUR_MS,
        2 * HOUR_MS,
        3 * HOUR_MS,
        6 * HOUR_MS,
        12 * HOUR_MS,
        DAY_MS,
        2 * DAY_MS,
        7 * DAY_MS,
        14 * DAY_MS,
        30 * DAY_MS,
    ];
    let span = hi - lo;
    let step = STEPS
        .iter()
        .map(|&s| s as i128)
        .find(|s| span / s <= 6)
        // Longer spans: whole days, about 6 ticks.
        .unwrap_or_else(|| (span / 6 / DAY_MS as i128 + 1) * DAY_MS as i128);
    let first = lo.div_euclid(step) * step + if lo.rem_euclid(step) == 0 { 0 } else { step };
    (0..8).map(|i| first + step * i).take_while(|&t| t <= hi).collect()
}

/// A time in UTC: `HH:MM` on a chart spanning a day or less, `MM-DD` beyond; `?` outside the
/// calendar chrono knows.
fn time_label(t: i128, day_or_less: bool) -> String {
    let time = i64::try_from(t).ok().and_then(chrono::DateTime::from_timestamp_millis);
    match time {
        Some(time) if day_or_less => time.format("%H:%M").to_string(),
        Some(time) => time.format("%m-%d").to_string(),
        None => "?".to_string(),
    }
}

/// A row of the data table: `HH:MM` within a day, the full date and time otherwise.
fn row_time_label(t: i64, day_or_less: bool) -> String {
    match chrono::DateTime::from_timestamp_millis(t) {
        Some(time) if day_or_less => time.format("%H:%M").to_string(),
        Some(time) => time.format("%Y-%m-%d %H:%M").to_string(),
        None => t.to_string(),
    }
}

/// A tick's label: compact (`950`, `1.2k`, `3.4M`, `0.05`) and the unit.
fn value_label(v: f64, unit: &str) -> String {
    let mut label = compact(v);
    if !unit.is_empty() {
        if unit != "%" {
            label.push(' ');
        }
        label.push_str(unit);
    }
    label
}

/// `v` with k, M, G, T suffixes and at most two decimals; scientific beyond 10^15.
fn compact(v: f64) -> String {
    let a = v.abs();
    if a >= 1e15 {
        return format!("{v:.1e}");
    }
    let (scaled, suffix) = match a {
        a if a >= 1e12 => (v / 1e12, "T"),
        a if a >= 1e9 => (v / 1e9, "G"),
        a if a >= 1e6 => (v / 1e6, "M"),
        a if a >= 1e3 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    if a != 0.0 && a < 0.01 {
        return format!("{v:.1e}");
    }
    let mut s = two_decimals(scaled);
    s.push_str(suffix);
    s
}

/// A value in the data table: up to two decimals, no suffix.
fn table_value(v: f64) -> String {
    if v.abs() >= 1e15 || (v != 0.0 && v.abs() < 0.01) {
        return format!("{v:e}");
    }
    two_decimals(v)
}

/// `v` with at most two decimals and no trailing zero (`12.5`, `3`, never `-0`).
fn two_decimals(v: f64) -> String {
    let mut s = format!("{v:.2}");
    while s.ends_with('0') {
        s.pop();
    }
    if s.ends_with('.') {
        s.pop();
    }
    if s == "-0" {
        s.remove(0);
    }
    s
}

/// A chart's element ids: a slug of its title and a process-wide counter.
fn chart_id(title: &str) -> String {
    let slug: String = title
        .chars()
        .filter_map(|c| match c {
            'a'..='z' | '0'..='9' => Some(c),
            'A'..='Z' => Some(c.to_ascii_lowercase()),
            ' ' | '-' | '_' => Some('-'),
            _ => None,
        })
        .take(24)
        .collect();
    format!("chart-{slug}-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed))
}

/// `<figure>`, its caption and the opening `<svg>` with its title and description.
fn open_figure(out: &mut String, id: &str, title: &str, desc: &str, class: &str, w: f64, h: f64) {
    let _ = write!(out, r#"<figure class="chart" aria-labelledby="{id}-c"><figcaption id="{id}-c">"#);
    push_escaped(out, title);
    let _ = write!(
        out,
        r#"</figcaption><svg xmlns="http://www.w3.org/2000/svg" class="{class}" role="img" aria-labelledby="{id}-t {id}-d" viewBox="0 0 {w} {h}" width="100%" preserveAspectRatio="xMinYMin meet" font-family="sans-serif"><title id="{id}-t">"#,
        w = r1(w),
        h = r1(h)
    );
    push_escaped(out, title);
    let _ = write!(out, r#"</title><desc id="{id}-d">"#);
    push_escaped(out, desc);
    out.push_str("</desc>");
}

fn empty_text(out: &mut String, w: f64, h: f64) {
    let _ = write!(
        out,
        r#"<text class="chart-empty" x="{}" y="{}" text-anchor="middle" font-size="14">No data</text>"#,
        r1(w / 2.0),
        r1(h / 2.0)
    );
}

fn axes(out: &mut String, plot: &Plot) {
    let _ = write!(
        out,
        r##"<path class="chart-axis" d="M{} {}V{}H{}" fill="none" stroke="#555"/>"##,
        r1(plot.x0),
        r1(plot.y0),
        r1(plot.y1),
        r1(plot.x1)
    );
}

/// One series as a `<path>` of relative moves in tenths (compact and exact: each step is the
/// difference of two rounded coordinates), or a dot for a single point.
fn series_path(out: &mut String, i: usize, points: &[(i64, f64)], plot: &Plot, t: (i128, i128), v: (f64, f64)) {
    let class = i % SERIES_CLASSES;
    let colour = SERIES_COLOURS[class];
    let tenths = |&(tm, val): &(i64, f64)| {
        let x = (plot.x_of(tm as i128, t.0, t.1) * 10.0).round() as i64;
        let y = (plot.y_of(val, v.0, v.1) * 10.0).round() as i64;
        (x, y)
    };
    match points {
        [] => {}
        [only] => {
            let (x, y) = tenths(only);
            let _ = write!(
                out,
                r#"<circle class="series-{class}" cx="{}" cy="{}" r="3" fill="{colour}"/>"#,
                Tenths(x),
                Tenths(y)
            );
        }
        [first, rest @ ..] => {
            let (mut px, mut py) = tenths(first);
            let _ = write!(
                out,
                r#"<path class="series-{class}" fill="none" stroke="{colour}" stroke-width="2" stroke-linejoin="round" d="M{} {}"#,
                Tenths(px),
                Tenths(py)
            );
            for p in rest {
                let (x, y) = tenths(p);
                let (dx, dy) = (x - px, y - py);
                // SVG's path grammar lets a minus sign separate two numbers.
                let sep = if dy < 0 { "" } else { " " };
                let _ = write!(out, "l{}{sep}{}", Tenths(dx), Tenths(dy));
                (px, py) = (x, y);
            }
            out.push_str(r#""/>"#);
        }
    }
}

/// Legend entries on one row (each name shortened to 24 characters fits a third of the plot).
const LEGEND_PER_ROW: usize = 3;
/// Height of one legend row, above the plot.
const LEGEND_ROW: f64 = 14.0;

fn legend_rows(series: usize) -> usize {
    series.div_ceil(LEGEND_PER_ROW)
}

/// The series' names in rows above the plot (in the band the plot starts below), each in its
/// series' colour.
fn legend(out: &mut String, names: &[&str], plot: &Plot) {
    out.push_str(r#"<g class="chart-legend" font-size="11">"#);
    let step = (plot.x1 - plot.x0) / LEGEND_PER_ROW as f64;
    for (i, name) in names.iter().enumerate() {
        let class = i % SERIES_CLASSES;
        let (row, column) = (i / LEGEND_PER_ROW, i % LEGEND_PER_ROW);
        let _ = write!(
            out,
            r#"<text class="series-{class}" x="{}" y="{}" fill="{}">"#,
            r1(plot.x0 + 8.0 + step * column as f64),
            r1(12.0 + LEGEND_ROW * row as f64),
            SERIES_COLOURS[class]
        );
        push_escaped(out, &format!("— {}", shorten(name, 24)));
        out.push_str("</text>");
    }
    out.push_str("</g>");
}

/// The line chart's data as a table: one row per instant, one column per series.
fn line_table(out: &mut String, title: &str, unit: &str, names: &[&str], series: &[Vec<(i64, f64)>], day: bool) {
    let mut rows: BTreeMap<i64, Vec<Option<f64>>> = BTreeMap::new();
    for (i, points) in series.iter().enumerate() {
        for &(t, v) in points {
            rows.entry(t).or_insert_with(|| vec![None; series.len()])[i] = Some(v);
        }
    }
    out.push_str(r#"<table class="visually-hidden"><caption>"#);
    push_escaped(out, title);
    out.push_str(r#"</caption><thead><tr><th scope="col">Time (UTC)</th>"#);
    for name in names {
        out.push_str(r#"<th scope="col">"#);
        push_escaped(out, name);
        if !unit.is_empty() {
            out.push_str(" (");
            push_escaped(out, unit);
            out.push(')');
        }
        out.push_str("</th>");
    }
    out.push_str("</tr></thead><tbody>");
    for (t, values) in rows {
        let _ = write!(out, "<tr><th>{}</th>", row_time_label(t, day));
        for v in values {
            out.push_str("<td>");
            if let Some(v) = v {
                out.push_str(&table_value(v));
            }
            out.push_str("</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
}

fn bar_table(out: &mut String, title: &str, unit: &str, bars: &[(&str, f64)]) {
    out.push_str(r#"<table class="visually-hidden"><caption>"#);
    push_escaped(out, title);
    out.push_str(r#"</caption><thead><tr><th scope="col">Name</th><th scope="col">Value"#);
    if !unit.is_empty() {
        out.push_str(" (");
        push_escaped(out, unit);
        out.push(')');
    }
    out.push_str("</th></tr></thead><tbody>");
    for &(label, v) in bars {
        out.push_str(r#"<tr><th scope="row">"#);
        push_escaped(out, label);
        let _ = write!(out, "</th><td>{}</td></tr>", table_value(v));
    }
    out.push_str("</tbody></table>");
}

/// At most `max` characters, the last one an ellipsis when cut.
fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut cut: String = s.chars().take(max - 1).collect();
    cut.push('…');
    cut
}

/// Rounds to one decimal for an SVG coordinate (`12.3`, `40`).
fn r1(v: f64) -> Tenths {
    Tenths((v * 10.0).round() as i64)
}

/// A number of tenths written as a decimal (`123` -> `12.3`, `-5` -> `-0.5`, `40` -> `4`).
struct Tenths(i64);

impl std::fmt::Display for Tenths {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let a = self.0.unsigned_abs();
        match a % 10 {
            0 => write!(f, "{sign}{}", a / 10),
            d => write!(f, "{sign}{}.{d}", a / 10),
        }
    }
}

/// Appends `s` escaped for HTML text and attribute values (the identity pages' one escape).
fn push_escaped(out: &mut String, s: &str) {
    out.push_str(&crate::identity::signin::escape(s));
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_764_288_000_000; // 2025-11-28T00:00:00Z

    /// The output is well-formed XML (every element closed, every attribute quoted), so the
    /// browser's HTML parser and a screen reader see the tree that was meant.
    fn assert_well_formed(html: &str) {
        let mut reader = quick_xml::Reader::from_str(html);
        loop {
            match reader.read_event() {
                Ok(quick_xml::events::Event::Eof) => break,
                Ok(_) => {}
                Err(e) => panic!("not well-formed: {e}\n{html}"),
            }
        }
    }

    /// No inline style (blocked by the console's CSP), no number the SVG cannot read.
    fn assert_clean(html: &str) {
        assert_well_formed(html);
        assert!(!html.contains("style="), "inline style attribute: {html}");
        assert!(!html.contains("<style"), "style element: {html}");
        for bad in ["NaN", "inf"] {
            assert!(!html.contains(bad), "{bad} in output: {html}");
        }
        assert!(html.contains(r#"role="img""#) && html.contains("<title id=") && html.contains("<desc id="));
    }

    fn ramp(n: i64, step_ms: i64, f: impl Fn(i64) -> f64) -> Vec<Point> {
        (0..n).map(|i| Point { t_ms: T0 + i * step_ms, v: f(i) }).collect()
    }

    /// The `d` attributes of the series' paths.
    fn series_paths(html: &str) -> Vec<&str> {
        html.split(r#"stroke-linejoin="round" d=""#).skip(1).map(|s| &s[..s.find('"').unwrap()]).collect()
    }

    fn table_rows(html: &str) -> usize {
        let body = &html[html.find("<tbody>").unwrap()..];
        body.matches("<tr>").count()
    }

    #[test]
    fn no_series_and_empty_series_say_no_data() {
        for html in [
            line_chart("Requests", "req", &[]),
            line_chart("Requests", "req", &[Series { name: "a", points: &[] }]),
            bar_chart("Top functions", "calls", &[]),
        ] {
            assert_clean(&html);
            assert!(html.contains("No data"), "{html}");
            assert_eq!(table_rows(&html), 0);
        }
    }

    #[test]
    fn one_point_is_a_dot_and_a_table_row() {
        let points = [Point { t_ms: T0 + 3_600_000, v: 42.0 }];
        let html = line_chart("Latency", "ms", &[Series { name: "p50", points: &points }]);
        assert_clean(&html);
        assert!(html.contains("<circle class=\"series-0\""), "{html}");
        assert!(series_paths(&html).is_empty());
        assert!(html.contains("<tr><th>01:00</th><td>42</td></tr>"), "{html}");
        assert!(html.contains(">40 ms</text>"), "a nice tick with its unit: {html}");
    }

    #[test]
    fn all_zero_values_draw_a_flat_line_on_a_unit_axis() {
        let points = ramp(10, 60_000, |_| 0.0);
        let html = line_chart("Errors", "", &[Series { name: "errors", points: &points }]);
        assert_clean(&html);
        let paths = series_paths(&html);
        assert_eq!(paths.len(), 1);
        // A flat line: every relative step has dy = 0.
        assert!(paths[0].split('l').skip(1).all(|step| step.ends_with(" 0")), "{}", paths[0]);
        assert!(html.contains(">0</text>") && html.contains(">1</text>"), "{html}");
    }

    #[test]
    fn nan_and_infinite_values_are_skipped() {
        let points = [
            Point { t_ms: T0, v: 1.0 },
            Point { t_ms: T0 + 60_000, v: f64::NAN },
            Point { t_ms: T0 + 120_000, v: f64::INFINITY },
            Point { t_ms: T0 + 180_000, v: f64::NEG_INFINITY },
            Point { t_ms: T0 + 240_000, v: 3.0 },
        ];
        let html = line_chart("Requests", "req", &[Series { name: "all", points: &points }]);
        assert_clean(&html);
        assert_eq!(table_rows(&html), 2);
        assert_eq!(series_paths(&html)[0].matches('l').count(), 1);
        let bars = bar_chart("Top", "calls", &[("a", f64::NAN), ("b", 2.0), ("c", f64::INFINITY)]);
        assert_clean(&bars);
        assert_eq!(table_rows(&bars), 1);
        assert_eq!(bars.matches("<rect").count(), 1);
        // Only non-finite values: nothing to draw.
        let html = line_chart("x", "", &[Series { name: "a", points: &[Point { t_ms: 0, v: f64::NAN }] }]);
        assert_clean(&html);
        assert!(html.contains("No data"));
    }

    #[test]
    fn negative_values_put_zero_inside_the_axis() {
        let points = ramp(5, 60_000, |i| (i as f64 - 2.0) * 10.0);
        let html = line_chart("Delta", "ms", &[Series { name: "d", points: &points }]);
        assert_clean(&html);
        assert!(
            html.contains(">-20 ms</text>") && html.contains(">0 ms</text>") && html.contains(">20 ms</text>"),
            "{html}"
        );
        let bars = bar_chart("Change", "%", &[("up", 12.5), ("down", -7.5)]);
        assert_clean(&bars);
        assert!(bars.contains(">-7.5%</text>") && bars.contains(">12.5%</text>"), "{bars}");
        assert!(bars.contains(r#"class="chart-axis""#));
    }

    #[test]
    fn huge_values_get_nice_compact_ticks() {
        let points = ramp(4, 60_000, |i| i as f64 * 1.1e6);
        let html = line_chart("Bytes", "B", &[Series { name: "b", points: &points }]);
        assert_clean(&html);
        assert!(html.contains(">1M B</text>") && html.contains(">4M B</text>"), "{html}");
        assert!(html.contains("<td>3300000</td>"), "the table keeps the exact value: {html}");
        for huge in [f64::MAX, f64::MIN, 1e300, -1e300, 1e20] {
            let points = [Point { t_ms: T0, v: huge }, Point { t_ms: T0 + 1, v: 1.0 }];
            let html = line_chart("Huge", "x", &[Series { name: "h", points: &points }]);
            assert_clean(&html);
            let bars = bar_chart("Huge", "x", &[("h", huge), ("one", 1.0)]);
            assert_clean(&bars);
        }
        // Tiny values get ticks of their own size, not 0 and 1 only.
        let points = ramp(3, 60_000, |i| i as f64 * 0.001);
        let html = line_chart("Tiny", "", &[Series { name: "t", points: &points }]);
        assert_clean(&html);
        assert!(html.contains(">1.0e-3</text>"), "{html}");
    }

    #[test]
    fn nice_steps_and_compact_labels() {
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(nice_step(f64::NAN), 1.0);
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.3), 2.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(7.0), 10.0);
        assert_eq!(nice_step(2_400.0), 5_000.0);
        assert_eq!(compact(0.0), "0");
        assert_eq!(compact(950.0), "950");
        assert_eq!(compact(1_200.0), "1.2k");
        assert_eq!(compact(3_400_000.0), "3.4M");
        assert_eq!(compact(-2_500_000_000.0), "-2.5G");
        assert_eq!(compact(0.25), "0.25");
        assert_eq!(compact(-0.0), "0");
        assert_eq!(table_value(-0.0), "0");
        assert_eq!(table_value(1_000.0), "1000");
        assert_eq!(table_value(12.345_6), "12.35");
        assert_eq!(compact(2e18), "2.0e18");
        assert_eq!(value_label(250.0, "ms"), "250 ms");
        assert_eq!(value_label(50.0, "%"), "50%");
        for n in [0.3, 0.1 + 0.2, 1e-300, 123_456.789] {
            let (ticks, lo, hi) = value_ticks([n].into_iter());
            assert!(ticks.len() >= 2 && ticks.len() <= 13, "{n}: {ticks:?}");
            assert!(lo <= 0.0 && hi >= n, "{n}: {lo}..{hi}");
        }
    }

    #[test]
    fn out_of_order_timestamps_are_sorted() {
        let sorted = ramp(6, 300_000, |i| (i * i) as f64);
        let mut shuffled = sorted.clone();
        shuffled.swap(0, 4);
        shuffled.swap(1, 5);
        let a = line_chart("Calls", "", &[Series { name: "c", points: &sorted }]);
        let b = line_chart("Calls", "", &[Series { name: "c", points: &shuffled }]);
        assert_clean(&b);
        assert_eq!(series_paths(&a), series_paths(&b));
        let rows = &b[b.find("<tbody>").unwrap()..];
        assert!(rows.find("00:00").unwrap() < rows.find("00:25").unwrap());
    }

    #[test]
    fn extreme_timestamps_do_not_panic() {
        let points = [Point { t_ms: i64::MIN, v: 1.0 }, Point { t_ms: i64::MAX, v: 2.0 }, Point { t_ms: 0, v: 3.0 }];
        let html = line_chart("Ages", "", &[Series { name: "x", points: &points }]);
        assert_clean(&html);
        let same = [Point { t_ms: T0, v: 1.0 }, Point { t_ms: T0, v: 2.0 }];
        let html = line_chart("Same", "", &[Series { name: "x", points: &same }]);
        assert_clean(&html);
    }

    #[test]
    fn time_ticks_are_utc_hours_within_a_day_and_dates_beyond() {
        let day = ramp(289, 300_000, |i| i as f64);
        let html = line_chart("Day", "", &[Series { name: "d", points: &day }]);
        assert_clean(&html);
        for tick in ["00:00", "06:00", "12:00", "18:00"] {
            assert!(html.contains(&format!(r#"font-size="11">{tick}</text>"#)), "{tick}: {html}");
        }
        // A table spanning a whole day names the date, so its first and last rows differ.
        assert!(html.contains("<tr><th>2025-11-28 00:00</th>") && html.contains("<tr><th>2025-11-29 00:00</th>"));
        let hours = ramp(12, HOUR_MS, |i| i as f64);
        let html = line_chart("Hours", "", &[Series { name: "h", points: &hours }]);
        assert!(html.contains("<tr><th>11:00</th>"), "{html}");
        let week = ramp(8, DAY_MS, |i| i as f64);
        let html = line_chart("Week", "", &[Series { name: "w", points: &week }]);
        assert_clean(&html);
        assert!(html.contains(">11-28</text>") && html.contains(">11-30</text>"), "{html}");
        assert!(html.contains("<tr><th>2025-11-29 00:00</th>"), "{html}");
        let ticks = time_ticks(T0 as i128 + 7, T0 as i128 + DAY_MS as i128);
        let six = 6 * HOUR_MS as i128;
        assert_eq!(ticks, (1..=4).map(|i| T0 as i128 + six * i).collect::<Vec<_>>());
        // Spans beyond the longest step: whole days, about 6 ticks.
        let ticks = time_ticks(0, 400 * DAY_MS as i128);
        assert!((5..=7).contains(&ticks.len()) && ticks.iter().all(|t| t % DAY_MS as i128 == 0), "{ticks:?}");
    }

    #[test]
    fn outside_text_is_escaped() {
        let evil = r#"<script>alert("x")</script> & 'y'"#;
        let points = ramp(3, 60_000, |i| i as f64);
        let series = [Series { name: evil, points: &points }, Series { name: evil, points: &points }];
        let html = line_chart(evil, evil, &series);
        let bars = bar_chart(evil, evil, &[(evil, 1.0)]);
        for html in [html, bars] {
            assert_clean(&html);
            assert!(!html.contains("<script") && !html.contains("'y'"), "{html}");
            assert!(html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"));
        }
    }

    #[test]
    fn ids_are_unique_per_chart() {
        let a = line_chart("Requests", "", &[]);
        let b = line_chart("Requests", "", &[]);
        let id = |h: &str| h[h.find("<title id=\"").unwrap() + 11..].split('"').next().unwrap().to_string();
        assert_ne!(id(&a), id(&b));
        assert!(id(&a).starts_with("chart-requests-"));
        assert!(a.contains(&format!(r#"aria-labelledby="{} "#, id(&a))));
    }

    /// The numeric `attr` of every `tag` in `html`, in order.
    fn attribute(html: &str, tag: &str, attr: &str) -> Vec<f64> {
        (html.split(tag).skip(1))
            .map(|t| t.split(&format!(r#" {attr}=""#)).nth(1).unwrap().split('"').next().unwrap().parse().unwrap())
            .collect()
    }

    #[test]
    fn series_classes_cycle_and_a_legend_names_them_above_the_plot() {
        let points = ramp(3, 60_000, |i| i as f64);
        let names = ["a long series name number 0", "s1", "s2", "s3", "s4", "s5", "s6"];
        let series: Vec<Series> = names.iter().map(|n| Series { name: n, points: &points }).collect();
        let html = line_chart("Many", "", &series);
        assert_clean(&html);
        for i in 0..6 {
            assert!(html.contains(&format!(r#"<path class="series-{i}""#)));
        }
        assert_eq!(html.matches(r#"<path class="series-0""#).count(), 2);
        assert!(html.contains(r#"<g class="chart-legend""#) && html.contains("— s6</text>"));
        // The legend has a band of its own: its texts (glyphs reach about 3 px below the baseline
        // at font-size 11) end above the plot's top gridline, where the lines start.
        let legend = html.split(r#"<g class="chart-legend""#).nth(1).unwrap().split("</g>").next().unwrap();
        let (xs, ys) = (attribute(legend, "<text", "x"), attribute(legend, "<text", "y"));
        let plot_top = attribute(&html, r#"<line class="chart-grid""#, "y1").into_iter().fold(f64::MAX, f64::min);
        assert!(ys.iter().all(|y| y + 3.0 < plot_top), "{ys:?} against the plot's top {plot_top}");
        // Entries on one row are a third of the plot apart (room for a 24-character name).
        for (i, (x, y)) in xs.iter().zip(&ys).enumerate() {
            for (x2, y2) in xs.iter().zip(&ys).skip(i + 1) {
                assert!(y != y2 || (x - x2).abs() >= (LINE_W - PAD_LEFT - PAD_RIGHT) / 3.0 - 0.1, "{xs:?} {ys:?}");
            }
        }
        assert!(!line_chart("One", "", &series[..1]).contains("chart-legend"), "one series needs no legend");
    }

    #[test]
    fn a_day_of_three_series_is_under_30_kb() {
        let a = ramp(288, 300_000, |i| 120.0 + (i as f64 * 0.37).sin() * 80.3);
        let b = ramp(288, 300_000, |i| 900.0 + (i as f64 * 0.11).cos() * 612.7);
        let c = ramp(288, 300_000, |i| 2_000.0 + (i * 7919 % 1000) as f64 * 3.21);
        let series = [
            Series { name: "p50", points: &a },
            Series { name: "p95", points: &b },
            Series { name: "p99", points: &c },
        ];
        let html = line_chart("Latency", "ms", &series);
        assert_clean(&html);
        assert_eq!(table_rows(&html), 288);
        assert!(html.len() < 30_000, "{} bytes", html.len());
    }

    #[test]
    fn bars_are_labelled_and_long_labels_cut() {
        let long = "a_function_with_a_very_long_name_indeed";
        let html = bar_chart("Top functions", "calls", &[("search", 1_200.0), (long, 30.0), ("zero", 0.0)]);
        assert_clean(&html);
        assert_eq!(html.matches(r#"<rect class="chart-bar"#).count(), 3);
        assert!(html.contains(">1.2k calls</text>") && html.contains(">search</text>"));
        assert!(html.contains(&format!(">{}…</text>", &long[..BAR_LABEL_CHARS - 1])));
        assert!(html.contains(&format!(r#"<th scope="row">{long}</th><td>30</td>"#)));
        let all_zero = bar_chart("Zero", "", &[("a", 0.0), ("b", 0.0)]);
        assert_clean(&all_zero);
    }

    /// The modules of the QR `<svg>`: its path's runs read back into a grid.
    fn qr_grid(svg: &str) -> (usize, Vec<Vec<bool>>) {
        let side: usize = svg.split("viewBox=\"0 0 ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        let d = svg.split(" d=\"").nth(1).unwrap().split('"').next().unwrap();
        let mut grid = vec![vec![false; side]; side];
        for run in d.split('M').filter(|r| !r.is_empty()) {
            let (x, rest) = run.split_once(' ').unwrap();
            let (y, rest) = rest.split_once('h').unwrap();
            let (len, _) = rest.split_once('v').unwrap();
            let (x, y, len): (usize, usize, usize) = (x.parse().unwrap(), y.parse().unwrap(), len.parse().unwrap());
            for cell in &mut grid[y][x..x + len] {
                assert!(!*cell, "runs overlap");
                *cell = true;
            }
        }
        (side, grid)
    }

    #[test]
    fn qr_code_decodes_back_to_its_data() {
        let uri = "otpauth://totp/toolgate:alice%40example.com?secret=JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP&issuer=toolgate&algorithm=SHA1&digits=6&period=30";
        let svg = qr_svg(uri);
        assert_well_formed(&svg);
        assert!(!svg.contains("style") && svg.contains(r#"role="img""#) && !svg.contains("otpauth"));
        let (side, grid) = qr_grid(&svg);
        let code = qrcode::QrCode::with_error_correction_level(uri.as_bytes(), qrcode::EcLevel::M).unwrap();
        assert_eq!(side, code.width() + 8);
        let dark = code.to_colors().iter().filter(|c| **c == qrcode::Color::Dark).count();
        assert_eq!(grid.iter().flatten().filter(|m| **m).count(), dark);
        // The three finder patterns: a dark 7x7 ring around a light ring around a dark 3x3.
        let w = code.width();
        for (fx, fy) in [(4, 4), (4 + w - 7, 4), (4, 4 + w - 7)] {
            for dy in 0..7 {
                for dx in 0..7 {
                    let ring = dx == 0 || dy == 0 || dx == 6 || dy == 6;
                    let core = (2..=4).contains(&dx) && (2..=4).contains(&dy);
                    assert_eq!(grid[fy + dy][fx + dx], ring || core, "finder at {fx},{fy} +{dx},{dy}");
                }
            }
        }
        // Rasterised at 4 px a module, a reader that is not the encoder finds the same text.
        let scale = 4;
        let px = side * scale;
        let mut img =
            rqrr::PreparedImage::prepare_from_greyscale(
                px,
                px,
                |x, y| {
                    if grid[y / scale][x / scale] {
                        0
                    } else {
                        255
                    }
                },
            );
        let grids = img.detect_grids();
        assert_eq!(grids.len(), 1);
        let (_, text) = grids[0].decode().unwrap();
        assert_eq!(text, uri);
    }

    #[test]
    fn qr_code_of_data_too_long_says_so() {
        let svg = qr_svg(&"x".repeat(5_000));
        assert_well_formed(&svg);
        assert!(svg.contains("QR code unavailable") && !svg.contains(" d=\""));
        let empty = qr_svg("");
        assert_well_formed(&empty);
        assert_eq!(qr_grid(&empty).0, 21 + 8);
    }
}
