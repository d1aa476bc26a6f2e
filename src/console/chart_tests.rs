//! The charts' tests: shapes, ticks, labels, escaping, sizes and the QR code read back.

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
        line_chart("Requests", "req", &[Series { name: "a", points: &[], measure: None }]),
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
    let html = line_chart("Latency", "ms", &[Series { name: "p50", points: &points, measure: None }]);
    assert_clean(&html);
    assert!(html.contains("<circle class=\"series-0\""), "{html}");
    assert!(series_paths(&html).is_empty());
    assert!(html.contains("<tr><th>01:00</th><td>42</td></tr>"), "{html}");
    assert!(html.contains(">40 ms</text>"), "a nice tick with its unit: {html}");
}

#[test]
fn all_zero_values_draw_a_flat_line_on_a_unit_axis() {
    let points = ramp(10, 60_000, |_| 0.0);
    let html = line_chart("Errors", "", &[Series { name: "errors", points: &points, measure: None }]);
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
    let html = line_chart("Requests", "req", &[Series { name: "all", points: &points, measure: None }]);
    assert_clean(&html);
    assert_eq!(table_rows(&html), 2);
    assert_eq!(series_paths(&html)[0].matches('l').count(), 1);
    let bars = bar_chart("Top", "calls", &[("a", f64::NAN), ("b", 2.0), ("c", f64::INFINITY)]);
    assert_clean(&bars);
    assert_eq!(table_rows(&bars), 1);
    assert_eq!(bars.matches("<rect").count(), 1);
    // Only non-finite values: nothing to draw.
    let html = line_chart("x", "", &[Series { name: "a", points: &[Point { t_ms: 0, v: f64::NAN }], measure: None }]);
    assert_clean(&html);
    assert!(html.contains("No data"));
}

#[test]
fn negative_values_put_zero_inside_the_axis() {
    let points = ramp(5, 60_000, |i| (i as f64 - 2.0) * 10.0);
    let html = line_chart("Delta", "ms", &[Series { name: "d", points: &points, measure: None }]);
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
    let html = line_chart("Bytes", "B", &[Series { name: "b", points: &points, measure: None }]);
    assert_clean(&html);
    assert!(html.contains(">1M B</text>") && html.contains(">4M B</text>"), "{html}");
    assert!(html.contains("<td>3300000</td>"), "the table keeps the exact value: {html}");
    for huge in [f64::MAX, f64::MIN, 1e300, -1e300, 1e20] {
        let points = [Point { t_ms: T0, v: huge }, Point { t_ms: T0 + 1, v: 1.0 }];
        let html = line_chart("Huge", "x", &[Series { name: "h", points: &points, measure: None }]);
        assert_clean(&html);
        let bars = bar_chart("Huge", "x", &[("h", huge), ("one", 1.0)]);
        assert_clean(&bars);
    }
    // Tiny values get ticks of their own size, not 0 and 1 only.
    let points = ramp(3, 60_000, |i| i as f64 * 0.001);
    let html = line_chart("Tiny", "", &[Series { name: "t", points: &points, measure: None }]);
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
    let a = line_chart("Calls", "", &[Series { name: "c", points: &sorted, measure: None }]);
    let b = line_chart("Calls", "", &[Series { name: "c", points: &shuffled, measure: None }]);
    assert_clean(&b);
    assert_eq!(series_paths(&a), series_paths(&b));
    let rows = &b[b.find("<tbody>").unwrap()..];
    assert!(rows.find("00:00").unwrap() < rows.find("00:25").unwrap());
}

#[test]
fn extreme_timestamps_do_not_panic() {
    let points = [Point { t_ms: i64::MIN, v: 1.0 }, Point { t_ms: i64::MAX, v: 2.0 }, Point { t_ms: 0, v: 3.0 }];
    let html = line_chart("Ages", "", &[Series { name: "x", points: &points, measure: None }]);
    assert_clean(&html);
    let same = [Point { t_ms: T0, v: 1.0 }, Point { t_ms: T0, v: 2.0 }];
    let html = line_chart("Same", "", &[Series { name: "x", points: &same, measure: None }]);
    assert_clean(&html);
}

#[test]
fn time_ticks_are_utc_hours_within_a_day_and_dates_beyond() {
    let day = ramp(289, 300_000, |i| i as f64);
    let html = line_chart("Day", "", &[Series { name: "d", points: &day, measure: None }]);
    assert_clean(&html);
    for tick in ["00:00", "06:00", "12:00", "18:00"] {
        assert!(html.contains(&format!(r#"font-size="11">{tick}</text>"#)), "{tick}: {html}");
    }
    // A table spanning a whole day names the date, so its first and last rows differ.
    assert!(html.contains("<tr><th>2025-11-28 00:00</th>") && html.contains("<tr><th>2025-11-29 00:00</th>"));
    let hours = ramp(12, HOUR_MS, |i| i as f64);
    let html = line_chart("Hours", "", &[Series { name: "h", points: &hours, measure: None }]);
    assert!(html.contains("<tr><th>11:00</th>"), "{html}");
    let week = ramp(8, DAY_MS, |i| i as f64);
    let html = line_chart("Week", "", &[Series { name: "w", points: &week, measure: None }]);
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
    let series =
        [Series { name: evil, points: &points, measure: None }, Series { name: evil, points: &points, measure: None }];
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
    let series: Vec<Series> = names.iter().map(|n| Series { name: n, points: &points, measure: None }).collect();
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
        Series { name: "p50", points: &a, measure: None },
        Series { name: "p95", points: &b, measure: None },
        Series { name: "p99", points: &c, measure: None },
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
        rqrr::PreparedImage::prepare_from_greyscale(px, px, |x, y| if grid[y / scale][x / scale] { 0 } else { 255 });
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

#[test]
fn a_colour_means_one_measure_and_the_legend_names_it() {
    let points = ramp(3, 60_000, |i| i as f64);
    // Errors are red wherever they are, first or second; calls blue.
    let errors_only =
        line_chart("E", "", &[Series { name: "errors", points: &points, measure: Some(Measure::Errors) }]);
    assert!(errors_only.contains(r#"<path class="series-1""#), "{errors_only}");
    let both = [
        Series { name: "errors", points: &points, measure: Some(Measure::Errors) },
        Series { name: "requests", points: &points, measure: Some(Measure::Calls) },
    ];
    let html = line_chart("Both", "", &both);
    assert!(html.contains(r#"<text class="series-1" "#) && html.contains("— errors</text>"), "{html}");
    assert!(html.contains(r#"<text class="series-0" "#) && html.contains("— requests</text>"), "{html}");
    // A function's bar: the calls that succeeded in the calls' colour, the failed in the errors'.
    let parts = [("succeeded", Measure::Calls), ("failed", Measure::Errors)];
    let bars = stacked_bar_chart("Top", "calls", &parts, &[("f", vec![3.0, 1.0]), ("g", vec![2.0, 0.0])]);
    assert_clean(&bars);
    assert_eq!(bars.matches(r#"<rect class="chart-bar series-0""#).count(), 2, "{bars}");
    assert_eq!(bars.matches(r#"<rect class="chart-bar series-1""#).count(), 1, "a part of 0 draws nothing: {bars}");
    assert!(bars.contains(">4 calls</text>") && bars.contains(">2 calls</text>"), "totals after the bars: {bars}");
    assert!(bars.contains(r#"<g class="chart-legend""#) && bars.contains("— failed</text>"), "{bars}");
    assert!(bars.contains(r#"<th scope="row">f</th><td>3</td><td>1</td>"#), "{bars}");
    // One unnamed measure: no legend, one colour.
    let one = bar_chart("One", "calls", &[("a", 1.0), ("b", 2.0)]);
    assert!(!one.contains("chart-legend") && !one.contains("series-1"), "{one}");
}
