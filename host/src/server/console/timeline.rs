//! A run's timeline as a picture: one row per pass, model turn, call and
//! wait, each a bar placed and sized by time on one shared scale (inline
//! SVG, no script or inline style, which the console's policy forbids),
//! labelled with its duration and tokens. A tool call's row opens
//! (`<details>`) to its full arguments and result. Everything a tool, a
//! model or a guest produced is escaped: a result is the attacker's text.

use std::fmt::Write as _;

use crate::runs::timeline::{Call, Pass, Step, Timeline, Wait, WaitKind, human_duration};

use super::html::{escape, pretty};

/// The scale's width in SVG units; the SVG stretches to its column.
const WIDTH: f64 = 1000.0;

/// The timeline's section of a run's page.
pub(super) fn timeline_section(timeline: &Timeline) -> String {
    let (start, end) = timeline.span();
    let scale = Scale { start, total: (end - start).max(1) as f64 };
    let turns = timeline.passes.iter().flat_map(|p| &p.steps).filter(|s| matches!(s, Step::Turn(_))).count();
    let mut rows = String::new();
    // Passes and waits in the order they began; a pass's steps under it.
    let mut items: Vec<(i64, bool, usize)> =
        timeline.passes.iter().enumerate().map(|(i, p)| (p.started_ms, true, i)).collect();
    items.extend(timeline.waits.iter().enumerate().map(|(i, w)| (w.started_ms, false, i)));
    items.sort();
    for (_, is_pass, i) in items {
        if is_pass {
            if let Some(pass) = timeline.passes.get(i) {
                pass_rows(&mut rows, &scale, pass);
            }
        } else if let Some(wait) = timeline.waits.get(i) {
            wait_row(&mut rows, &scale, wait);
        }
    }
    if timeline.passes.is_empty() && timeline.waits.is_empty() {
        rows.push_str("<li class=\"muted\">Nothing ran yet.</li>");
    }
    if let Some(note) = timeline.left_out_note() {
        let _ = write!(rows, "<li class=\"muted\">{}.</li>", escape(&note));
    }
    let live = if timeline.status.is_final() {
        ""
    } else {
        " <span class=\"muted\">(as the page loaded; reload for more)</span>"
    };
    format!(
        "<section class=\"panel timeline\" id=\"timeline\"><p class=\"tl-summary\">{passes} pass{pe} · {turns} model \
         turn{te} · {input} input / {output} output tokens{cost} · {took}{live}</p><ol class=\"tl\">{rows}</ol></section>",
        passes = timeline.passes.len(),
        pe = if timeline.passes.len() == 1 { "" } else { "es" },
        te = if turns == 1 { "" } else { "s" },
        input = timeline.input_tokens,
        output = timeline.output_tokens,
        cost = timeline.cost_usd.map(|usd| format!(" · ${usd:.6}")).unwrap_or_default(),
        took = human_duration(end - start),
    )
}

/// Where times fall on the bar's scale.
struct Scale {
    start: i64,
    total: f64,
}

impl Scale {
    /// A track with one bar from `from` to `to` (`None`: still going, drawn
    /// to the end), of `class`, titled `title`; an empty track when the
    /// time was not recorded.
    fn track(&self, from: Option<i64>, to: Option<i64>, class: &str, title: &str) -> String {
        let Some(from) = from else {
            return "<svg class=\"tl-track\" viewBox=\"0 0 1000 10\" preserveAspectRatio=\"none\" aria-hidden=\"true\">\
                    </svg>"
                .to_string();
        };
        let x = ((from - self.start) as f64 / self.total * WIDTH).clamp(0.0, WIDTH);
        let end = to.map_or(WIDTH, |to| ((to - self.start) as f64 / self.total * WIDTH).clamp(0.0, WIDTH));
        // A call of a millisecond still shows.
        let width = (end - x).max(2.0).min(WIDTH - x + 2.0);
        format!(
            "<svg class=\"tl-track\" viewBox=\"0 0 1000 10\" preserveAspectRatio=\"none\" role=\"img\" \
             aria-label=\"{title}\"><rect class=\"tl-bar {class}\" x=\"{x:.1}\" y=\"0\" width=\"{width:.1}\" \
             height=\"10\"><title>{title}</title></rect></svg>"
        )
    }
}

fn took(ms: Option<i64>) -> String {
    ms.map_or_else(|| "time not recorded".to_string(), human_duration)
}

fn pass_rows(out: &mut String, scale: &Scale, pass: &Pass) {
    let lasted = match pass.ended_ms {
        Some(_) => took(pass.duration_ms),
        None => "running".to_string(),
    };
    let owner = pass.owner.as_deref().map(|o| format!(" on {}", escape(o))).unwrap_or_default();
    let label = format!("Pass {} · {} · {lasted}", pass.number, escape(&pass.outcome));
    let _ = write!(
        out,
        "<li class=\"tl-row\" data-kind=\"pass\"><div class=\"tl-line\"><span class=\"tl-label\" title=\"{label}{owner}\">\
         <strong>{label}</strong></span>{}</div></li>",
        scale.track(Some(pass.started_ms), pass.ended_ms, "tl-pass", &label)
    );
    for step in &pass.steps {
        match step {
            Step::Turn(t) => {
                let mut label = format!(
                    "Turn {} · {} · {} in / {} out tokens",
                    t.number,
                    took(t.duration_ms),
                    t.input_tokens,
                    t.output_tokens
                );
                if let Some(finish) = &t.finish {
                    let _ = write!(label, " · {}", escape(finish));
                }
                if let Some(error) = &t.error {
                    let _ = write!(label, " · {}", escape(error));
                }
                let _ = write!(
                    out,
                    "<li class=\"tl-row tl-step\" data-kind=\"turn\"><div class=\"tl-line\"><span class=\"tl-label\">\
                     {label}</span>{}</div></li>",
                    scale.track(t.started_ms, t.ended_ms, "tl-turn", &label)
                );
            }
            Step::ToolCall(c) => call_row(out, scale, "tool_call", "tl-tool", c),
            Step::McpCall(c) => call_row(out, scale, "mcp_call", "tl-mcp", c),
            Step::HostCall(c) => call_row(out, scale, "host_call", "tl-host", c),
        }
    }
}

fn call_row(out: &mut String, scale: &Scale, kind: &str, class: &str, call: &Call) {
    let verdict = call.verdict.as_deref().unwrap_or(if call.error { "error" } else { "ok" });
    let label = format!("{} · {} · {}", escape(&call.name), took(call.duration_ms), escape(verdict));
    let mut body = String::new();
    if let Some(id) = &call.id {
        let _ = write!(body, "<p class=\"muted\">Call <code>{}</code></p>", escape(id));
    }
    if let Some(arguments) = &call.arguments {
        let _ = write!(body, "<h4>Arguments</h4><pre class=\"tl-arguments\">{}</pre>", escape(&pretty(arguments)));
    }
    if let Some(result) = &call.result {
        let what = if call.error { "Error" } else { "Result" };
        let _ = write!(body, "<h4>{what}</h4><pre class=\"tl-result\">{}</pre>", escape(result));
    }
    let bad = if call.error || call.verdict.as_deref().is_some_and(|v| v != "allowed") { " tl-bad" } else { "" };
    let _ = write!(
        out,
        "<li class=\"tl-row tl-step\" data-kind=\"{kind}\"><details><summary class=\"tl-line\"><span class=\"tl-label\">\
         {label}</span>{}</summary><div class=\"tl-detail\">{body}</div></details></li>",
        scale.track(call.started_ms, call.ended_ms, &format!("{class}{bad}"), &label)
    );
}

fn wait_row(out: &mut String, scale: &Scale, wait: &Wait) {
    let kind = match wait.kind {
        WaitKind::Start => "Waiting to start",
        WaitKind::Approval => "Waiting for approval",
        WaitKind::Suspended => "Suspended",
    };
    let lasted = if wait.ended_ms.is_some() { took(wait.duration_ms) } else { "waiting".to_string() };
    let mut label = format!("{kind} · {lasted}");
    if let Some(tool) = &wait.tool {
        let _ = write!(label, " · {}", escape(tool));
    }
    if let Some(decision) = &wait.decision {
        let _ = write!(label, " · {}", escape(decision));
    }
    if let Some(reason) = &wait.reason {
        let _ = write!(label, " · {}", escape(reason));
    }
    let _ = write!(
        out,
        "<li class=\"tl-row\" data-kind=\"wait\"><div class=\"tl-line\"><span class=\"tl-label\"><em>{label}</em></span>{}\
         </div></li>",
        scale.track(Some(wait.started_ms), wait.ended_ms, "tl-wait", &label)
    );
}

#[cfg(test)]
mod tests {
    use nexo_store::{Entry, RunStatus};
    use serde_json::json;

    use super::*;
    use crate::runs::timeline::tests::{event, run};

    /// A tool's result is the attacker's text: on the page it is text, and
    /// the bars sit where their times say.
    #[test]
    fn a_result_with_markup_renders_inert_and_bars_follow_the_clock() {
        let evil = "<script>alert(1)</script>";
        let run = run(RunStatus::Done, 1_000, 2_000);
        let events = [
            event(1, "pass", json!({"owner": "h:1:n"}), 1_000),
            event(
                2,
                "tool_call",
                json!({"turn": 1, "id": evil, "name": evil, "arguments": {"p": evil}, "entry": 0}),
                1_500,
            ),
            event(
                3,
                "tool_result",
                json!({"turn": 1, "id": evil, "name": evil, "verdict": "allowed", "entry": 0}),
                1_750,
            ),
        ];
        let entry = Entry {
            seq: 0,
            end: 1,
            interface: "nexo:plugin/tools@0.1.2".into(),
            function: "read-file".into(),
            args_hash: String::new(),
            result: json!({"Ok": evil}).to_string(),
            started_ms: Some(1_500),
            ended_ms: Some(1_750),
        };
        let timeline = Timeline::build(&run, &events, &[entry], None);
        let html = timeline_section(&timeline);
        assert!(!html.contains("<script"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "the result as text: {html}");
        assert!(html.contains("<pre class=\"tl-result\">&lt;script&gt;"), "the full result, opened: {html}");
        // 500 ms into a run of 1000 ms, for 250 ms.
        assert!(html.contains("class=\"tl-bar tl-tool\" x=\"500.0\" y=\"0\" width=\"250.0\""), "{html}");
        assert!(html.contains("Pass 1 · done · 1.0 s"), "{html}");
        assert!(!html.contains("more steps not listed"), "{html}");
        // A timeline past its cap says how many steps it leaves out.
        let cut = Timeline { left_out: 3, ..timeline };
        assert!(timeline_section(&cut).contains("3 more steps not listed"));
    }
}
