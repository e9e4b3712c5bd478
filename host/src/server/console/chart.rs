//! Runs per hour as an inline SVG bar chart (no script).

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use nexo_store::Usage;

pub(super) const HOUR_MS: i64 = 3_600_000;

/// A round number at or above `n` for a chart's top (1, 2 or 5 times a
/// power of ten).
fn nice_ceiling(n: u64) -> u64 {
    if n <= 5 {
        return n.max(1);
    }
    let mut magnitude = 1u64;
    while magnitude.saturating_mul(10) <= n {
        magnitude *= 10;
    }
    [1u64, 2, 5, 10].into_iter().map(|m| m.saturating_mul(magnitude)).find(|&v| v >= n).unwrap_or(n)
}

/// Runs per hour over the `hours` hours from `start_ms`, as an inline SVG
/// bar chart (no script).
pub(super) fn runs_chart(periods: &[Usage], start_ms: i64, hours: usize) -> String {
    let mut counts = vec![0u64; hours];
    for p in periods {
        let i = (p.period_ms - start_ms).div_euclid(HOUR_MS);
        if let Some(slot) = usize::try_from(i).ok().and_then(|i| counts.get_mut(i)) {
            *slot += p.runs;
        }
    }
    let top = nice_ceiling(counts.iter().copied().max().unwrap_or(0));
    let (width, height) = (760.0_f64, 220.0_f64);
    let (left, right, above, below) = (44.0, 12.0, 14.0, 30.0);
    let plot_w = width - left - right;
    let plot_h = height - above - below;
    let slot = plot_w / hours.max(1) as f64;
    let mut svg = format!(
        "<svg class=\"chart\" id=\"runs-chart\" viewBox=\"0 0 {width} {height}\" role=\"img\" \
         aria-labelledby=\"chart-title\"><title id=\"chart-title\">Runs per hour, the last {hours} hours</title>"
    );
    let ticks: &[u64] = if top >= 2 && top.is_multiple_of(2) { &[0, 1, 2] } else { &[0, 2] };
    for &t in ticks {
        let value = top * t / 2;
        let y = above + plot_h - plot_h * (value as f64 / top as f64);
        let _ = write!(
            svg,
            "<line class=\"grid\" x1=\"{left}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{value}</text>",
            width - right,
            left - 6.0,
            y + 4.0
        );
    }
    let label_every = if hours <= 24 { 3 } else { 24 };
    for (i, &count) in counts.iter().enumerate() {
        let at = start_ms + i as i64 * HOUR_MS;
        let stamp =
            humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(u64::try_from(at).unwrap_or(0)))
                .to_string();
        let x = left + slot * i as f64;
        if count > 0 {
            let h = plot_h * (count as f64 / top as f64);
            let plural = if count == 1 { "" } else { "s" };
            let _ = write!(
                svg,
                "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\">\
                 <title>{} {}:00 UTC: {count} run{plural}</title></rect>",
                x + slot * 0.1,
                above + plot_h - h,
                slot * 0.8,
                stamp.get(..10).unwrap_or(""),
                stamp.get(11..13).unwrap_or(""),
            );
        }
        if i.is_multiple_of(label_every) {
            let label = if hours <= 24 {
                format!("{}:00", stamp.get(11..13).unwrap_or(""))
            } else {
                stamp.get(5..10).unwrap_or("").to_string()
            };
            let _ = write!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>",
                x + slot / 2.0,
                height - 10.0
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_draws_a_bar_per_busy_hour() {
        let start = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS;
        let usage = |hour: i64, runs| Usage {
            tenant: "t".into(),
            period_ms: start + hour * HOUR_MS,
            runs,
            tokens: 0,
            cpu_ticks: 0,
            egress_bytes: 0,
            cost_nanos: 0,
        };
        let svg = runs_chart(&[usage(0, 3), usage(5, 7), usage(30, 9)], start, 24);
        assert_eq!(svg.matches("<rect class=\"bar\"").count(), 2, "the hour outside the window is left out");
        assert!(svg.contains("7 runs") && svg.contains("3 runs"), "{svg}");
        assert!(svg.contains(">10</text>"), "the top is rounded up: {svg}");
        assert!(!runs_chart(&[], start, 24).contains("<rect"));
        assert_eq!(
            (nice_ceiling(0), nice_ceiling(4), nice_ceiling(7), nice_ceiling(11), nice_ceiling(300)),
            (1, 4, 10, 20, 500)
        );
    }
}
