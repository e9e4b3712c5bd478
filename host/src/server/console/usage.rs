//! The usage page: runs per hour and the totals.

use std::fmt::Write as _;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use nexo_store::Usage;
use serde::Deserialize;

use super::chart::{HOUR_MS, runs_chart};
use super::failure::{Failure, Page};
use super::html::{Nav, html, page, time_tag};
use super::who::Console;
use crate::server::api;
use crate::server::api::AppState;

/// `?hours=` of the usage page.
#[derive(Deserialize, Debug, Default)]
pub(super) struct UsageQuery {
    pub(super) hours: Option<String>,
}

/// `GET /usage`: runs per hour as a chart, and the totals.
pub(super) async fn usage_page(State(state): State<AppState>, console: Console, Query(q): Query<UsageQuery>) -> Page {
    let hours: usize = if q.hours.as_deref() == Some("168") { 168 } else { 24 };
    let now = nexo_store::now_ms();
    let start = now - now.rem_euclid(HOUR_MS) - (hours as i64 - 1) * HOUR_MS;
    let all = state.store.usage(&console.tenant.id, 0).await.map_err(|e| Failure::store(e, Some(&console)))?;
    let recent: Vec<Usage> = all.iter().filter(|u| u.period_ms >= start).cloned().collect();
    let (window, total) = (api::usage_json(&recent), api::usage_json(&all));
    let mut cards = String::new();
    for (field, label) in
        [("runs", "Runs"), ("tokens", "Model tokens"), ("cpu_ticks", "CPU ticks"), ("egress_bytes", "Egress bytes")]
    {
        let _ = write!(
            cards,
            "<div class=\"panel\"><div class=\"muted\">{label}</div><div class=\"value\" id=\"total-{field}\">{}</div>\
             <div class=\"muted\">{} in all</div></div>",
            window["total"][field].as_u64().unwrap_or(0),
            total["total"][field].as_u64().unwrap_or(0),
        );
    }
    let _ = write!(
        cards,
        "<div class=\"panel\"><div class=\"muted\">Model cost</div><div class=\"value\" id=\"total-cost_usd\">\
         ${:.4}</div><div class=\"muted\">${:.4} in all</div></div>",
        window["total"]["cost_usd"].as_f64().unwrap_or(0.0),
        total["total"]["cost_usd"].as_f64().unwrap_or(0.0),
    );
    let mut rows = String::new();
    for u in recent.iter().rev() {
        let _ = write!(
            rows,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">${:.4}</td></tr>",
            time_tag(u.period_ms),
            u.runs,
            u.tokens,
            u.cpu_ticks,
            u.egress_bytes,
            crate::spend::usd(u.cost_nanos)
        );
    }
    if rows.is_empty() {
        rows.push_str("<tr><td colspan=\"6\" class=\"muted\">Nothing used in this period.</td></tr>");
    }
    let here = |h: usize| if h == hours { " class=\"here\"" } else { "" };
    let body = format!(
        "<h1>Usage</h1><div class=\"filters\"><a href=\"/usage\"{}>last 24 hours</a>\
         <a href=\"/usage?hours=168\"{}>last 7 days</a></div>\
         <div class=\"totals\">{cards}</div><h2>Runs per hour</h2>{}\
         <h2>By hour</h2><table><thead><tr><th>Hour</th><th class=\"num\">Runs</th><th class=\"num\">Tokens</th>\
         <th class=\"num\">CPU ticks</th><th class=\"num\">Egress bytes</th><th class=\"num\">Cost</th></tr></thead><tbody>{rows}</tbody></table>",
        here(24),
        here(168),
        runs_chart(&recent, start, hours),
    );
    Ok(html(StatusCode::OK, page("Usage", Some(&console.who()), Nav::Usage, &body)))
}
