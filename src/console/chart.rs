//! Charts as HTML: a stand-in with the interface of the SVG charts (a line chart over time, a
//! bar chart, the QR code of an MFA set-up), drawing each as a table of its data.

use super::html::escape;

/// One point of a series: its time (ms since the epoch) and value.
pub struct Point {
    pub t_ms: i64,
    pub v: f64,
}

/// A named series of points.
pub struct Series<'a> {
    pub name: &'a str,
    pub points: &'a [Point],
}

fn time(t_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(t_ms).map(|t| t.format("%Y-%m-%d %H:%M").to_string()).unwrap_or_default()
}

/// A line chart of `series` over time, in `unit`: a `<figure>` with the data as a table.
pub fn line_chart(title: &str, unit: &str, series: &[Series<'_>]) -> String {
    let mut out = format!(
        "<figure><figcaption>{} ({})</figcaption><table><thead><tr><th scope=\"col\">Time</th>",
        escape(title),
        escape(unit)
    );
    for s in series {
        out.push_str(&format!("<th scope=\"col\">{}</th>", escape(s.name)));
    }
    out.push_str("</tr></thead><tbody>");
    let len = series.iter().map(|s| s.points.len()).max().unwrap_or(0);
    for i in 0..len {
        let t = series.iter().find_map(|s| s.points.get(i)).map_or(0, |p| p.t_ms);
        out.push_str(&format!("<tr><td>{}</td>", time(t)));
        for s in series {
            out.push_str(&format!("<td>{}</td>", s.points.get(i).map(|p| p.v.to_string()).unwrap_or_default()));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></figure>");
    out
}

/// A bar chart of named values in `unit`.
pub fn bar_chart(title: &str, unit: &str, bars: &[(&str, f64)]) -> String {
    let mut out = format!("<figure><figcaption>{} ({})</figcaption><table><tbody>", escape(title), escape(unit));
    for (name, v) in bars {
        out.push_str(&format!("<tr><th scope=\"row\">{}</th><td>{v}</td></tr>", escape(name)));
    }
    out.push_str("</tbody></table></figure>");
    out
}

/// The QR code of `data` (an `otpauth://` URI); here, the text to type in instead.
pub fn qr_svg(data: &str) -> String {
    format!("<table><tbody><tr><td><code>{}</code></td></tr></tbody></table>", escape(data))
}
