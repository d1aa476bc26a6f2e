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
pub(super) struct Point {
    pub t_ms: i64,
    pub v: f64,
}

/// A named series of a line chart; `measure` fixes its colour (else its place in the chart's
/// list picks one).
#[derive(Debug, Clone, Copy)]
pub(super) struct Series<'a> {
    pub name: &'a str,
    pub points: &'a [Point],
    pub measure: Option<Measure>,
}

/// What a series or a part of a bar measures. A colour means one measure on every chart of the
/// console (calls are always blue, errors always red), and the legend names it: the class
/// `series-N` of [`Measure::class`], coloured by the stylesheet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Measure {
    /// Calls (requests, and the calls that succeeded).
    Calls,
    /// Errors (the calls that failed).
    Errors,
    /// A mean duration.
    Duration,
    /// The duration percentiles.
    P50,
    P95,
    P99,
}

impl Measure {
    fn class(self) -> usize {
        match self {
            Measure::Calls => 0,
            Measure::Errors => 1,
            Measure::Duration => 2,
            Measure::P50 => 5,
            Measure::P95 => 4,
            Measure::P99 => 3,
        }
    }
}

/// The colour class of the `i`th series: its measure's, else by its place.
fn class_of(i: usize, measure: Option<Measure>) -> usize {
    measure.map_or(i % SERIES_CLASSES, Measure::class)
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
pub(super) fn line_chart(title: &str, unit: &str, series: &[Series<'_>]) -> String {
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
        let classes: Vec<usize> = series.iter().enumerate().map(|(i, s)| class_of(i, s.measure)).collect();
        for (points, &class) in clean.iter().zip(&classes) {
            series_path(&mut out, class, points, &plot, (t_lo, t_hi), (v_lo, v_hi));
        }
        if series.len() > 1 {
            legend(&mut out, &names, &classes, &plot);
        }
    }
    out.push_str("</svg>");
    // Rows name the date from a whole day on: a row's HH:MM could otherwise appear twice.
    line_table(&mut out, title, unit, &names, &clean, t_hi - t_lo < DAY_MS as i128);
    out.push_str("</figure>");
    out
}

/// Horizontal bars of one unnamed measure (calls, no legend): [`stacked_bar_chart`] of one part.
#[cfg(test)]
pub(super) fn bar_chart(title: &str, unit: &str, bars: &[(&str, f64)]) -> String {
    let bars: Vec<(&str, Vec<f64>)> = bars.iter().map(|&(label, v)| (label, vec![v])).collect();
    stacked_bar_chart(title, unit, &[("", Measure::Calls)], &bars)
}

/// Horizontal bars, each the sum of `parts` (name, measure) drawn end to end in their measures'
/// colours (a function's calls: those that succeeded, then those that failed), with a legend of
/// the parts when they are named; the value after a bar is its total. Each bar's values are in
/// the order of `parts` (a missing one is 0).
pub(super) fn stacked_bar_chart(
    title: &str,
    unit: &str,
    parts: &[(&str, Measure)],
    bars: &[(&str, Vec<f64>)],
) -> String {
    let clean: Vec<(&str, Vec<f64>)> = bars
        .iter()
        .map(|(label, vs)| {
            let vs = (0..parts.len()).map(|i| vs.get(i).copied().unwrap_or(0.0)).collect::<Vec<_>>();
            (*label, vs)
        })
        .filter(|(_, vs)| vs.iter().all(|v| v.is_finite()))
        .map(|(label, vs)| (label, vs.into_iter().map(|v| v.clamp(-VALUE_LIMIT, VALUE_LIMIT)).collect()))
        .collect();
    let id = chart_id(title);
    let legend_band = if parts.iter().any(|p| !p.0.is_empty()) { LEGEND_ROW + 4.0 } else { 0.0 };
    let height = PAD_TOP + PAD_BOTTOM + legend_band + BAR_ROW * clean.len().max(2) as f64;
    let mut out = String::with_capacity(1024 + clean.len() * 300 * parts.len());
    let desc =
        format!("Bar chart of {} entries, values in {}.", clean.len(), if unit.is_empty() { "units" } else { unit });
    open_figure(&mut out, &id, title, &desc, "chart-bars", BAR_W, height);
    // Room on the right for the value written after the longest bar.
    let plot = Plot { x0: BAR_LABEL_W, x1: BAR_W - 80.0, y0: PAD_TOP + legend_band, y1: height - PAD_BOTTOM };
    if clean.is_empty() {
        empty_text(&mut out, BAR_W, height);
    } else {
        // The axis spans the bars' ends: positive parts stack rightwards, negative leftwards.
        let ends = clean.iter().flat_map(|(_, vs)| {
            [vs.iter().filter(|v| **v > 0.0).sum::<f64>(), vs.iter().filter(|v| **v < 0.0).sum::<f64>()]
        });
        let (ticks, lo, hi) = value_ticks(ends.map(|v| v.clamp(-VALUE_LIMIT, VALUE_LIMIT)));
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
        let classes: Vec<usize> = parts.iter().map(|p| p.1.class()).collect();
        for (i, (label, vs)) in clean.iter().enumerate() {
            bar(&mut out, &plot, (lo, hi), plot.y0 + BAR_ROW * i as f64, (label, vs), (&classes, unit));
        }
        let _ = write!(
            out,
            r##"<line class="chart-axis" x1="{z}" y1="{}" x2="{z}" y2="{}" stroke="#555"/>"##,
            r1(plot.y0),
            r1(plot.y1),
            z = r1(zero)
        );
        if legend_band > 0.0 {
            let names: Vec<&str> = parts.iter().map(|p| p.0).collect();
            legend(&mut out, &names, &classes, &plot);
        }
    }
    out.push_str("</svg>");
    bar_table(&mut out, title, unit, parts, &clean);
    out.push_str("</figure>");
    out
}

/// One bar at `top`: its label, a `<rect>` per non-zero part (one in its colour at least, so a
/// bar of zero is still a mark) and its total after it.
fn bar(
    out: &mut String,
    plot: &Plot,
    (lo, hi): (f64, f64),
    top: f64,
    (label, vs): (&str, &[f64]),
    (classes, unit): (&[usize], &str),
) {
    let _ = write!(
        out,
        r#"<text class="chart-label" x="{}" y="{}" text-anchor="end" font-size="12">"#,
        r1(plot.x0 - 8.0),
        r1(top + BAR_ROW / 2.0 + 4.0)
    );
    push_escaped(out, &shorten(label, BAR_LABEL_CHARS));
    out.push_str("</text>");
    let (mut right, mut left) = (0.0f64, 0.0f64);
    for (k, (&v, &class)) in vs.iter().zip(classes).enumerate() {
        if v == 0.0 && !(k == 0 && vs.iter().all(|v| *v == 0.0)) {
            continue;
        }
        let (from, to) = if v >= 0.0 { (right, right + v) } else { (left + v, left) };
        if v >= 0.0 {
            right += v
        } else {
            left += v
        }
        let (x0, x1) = (plot.value_x(from.max(-VALUE_LIMIT), lo, hi), plot.value_x(to.min(VALUE_LIMIT), lo, hi));
        let _ = write!(
            out,
            r#"<rect class="chart-bar series-{class}" x="{}" y="{}" width="{}" height="{}" fill="{}"/>"#,
            r1(x0.min(x1)),
            r1(top + 4.0),
            r1((x1 - x0).abs()),
            r1(BAR_ROW - 8.0),
            SERIES_COLOURS[class],
        );
    }
    let total: f64 = vs.iter().sum();
    let end = plot.value_x(if total >= 0.0 { right } else { left }, lo, hi).max(plot.value_x(0.0, lo, hi));
    let _ = write!(
        out,
        r#"<text class="chart-label" x="{}" y="{}" font-size="11">"#,
        r1(end + 4.0),
        r1(top + BAR_ROW / 2.0 + 4.0),
    );
    push_escaped(out, &value_label(total, unit));
    out.push_str("</text>");
}

/// A QR code of `data` (an `otpauth://` URI for MFA set-up) as an inline `<svg>`: black modules
/// on a white square with the standard 4-module quiet zone, one `<path>` of horizontal runs,
/// error correction level M. Data too long for a QR code gives an `<svg>` whose title says so.
pub(super) fn qr_svg(data: &str) -> String {
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
fn series_path(out: &mut String, class: usize, points: &[(i64, f64)], plot: &Plot, t: (i128, i128), v: (f64, f64)) {
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
/// series' colour (`classes`, one per name).
fn legend(out: &mut String, names: &[&str], classes: &[usize], plot: &Plot) {
    out.push_str(r#"<g class="chart-legend" font-size="11">"#);
    let step = (plot.x1 - plot.x0) / LEGEND_PER_ROW as f64;
    for (i, (name, &class)) in names.iter().zip(classes).enumerate() {
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
    table_head(out, title, "Time (UTC)", names, unit);
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

/// A chart's data table up to its body: the caption, the `first` column's header and a header
/// per series (`name (unit)`).
fn table_head(out: &mut String, title: &str, first: &str, names: &[&str], unit: &str) {
    out.push_str(r#"<table class="visually-hidden"><caption>"#);
    push_escaped(out, title);
    let _ = write!(out, r#"</caption><thead><tr><th scope="col">{first}</th>"#);
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
}

fn bar_table(out: &mut String, title: &str, unit: &str, parts: &[(&str, Measure)], bars: &[(&str, Vec<f64>)]) {
    let names: Vec<&str> = parts.iter().map(|(name, _)| if name.is_empty() { "Value" } else { name }).collect();
    table_head(out, title, "Name", &names, unit);
    for (label, vs) in bars {
        out.push_str(r#"<tr><th scope="row">"#);
        push_escaped(out, label);
        out.push_str("</th>");
        for v in vs {
            let _ = write!(out, "<td>{}</td>", table_value(*v));
        }
        out.push_str("</tr>");
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
#[path = "chart_tests.rs"]
mod tests;
