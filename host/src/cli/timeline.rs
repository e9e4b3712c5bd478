//! A run's timeline as text, for `nexo runs show --full`: each pass and
//! wait in order, within a pass its turns and calls with their durations
//! and tokens, and each call's full arguments and result, indented.

use std::fmt::Write as _;

use nexo::runs::timeline::{Call, Pass, Step, Timeline, Wait, human_duration};
use nexo::terminal::{Lines, escape};

/// The timeline as indented text. Control characters in what a tool or
/// a model returned are escaped, so a result cannot drive the terminal.
pub fn text(timeline: &Timeline) -> String {
    let mut out = String::new();
    let turns = timeline.passes.iter().flat_map(|p| &p.steps).filter(|s| matches!(s, Step::Turn(_))).count();
    let _ = writeln!(
        out,
        "timeline:  {} pass{}, {turns} model turn{}, {} input / {} output tokens{}",
        timeline.passes.len(),
        if timeline.passes.len() == 1 { "" } else { "es" },
        if turns == 1 { "" } else { "s" },
        timeline.input_tokens,
        timeline.output_tokens,
        timeline.cost_usd.map(|usd| format!(", ${usd:.6}")).unwrap_or_default()
    );
    if let Some(note) = timeline.left_out_note() {
        let _ = writeln!(out, "  ({note}; `nexo runs events` has every event)");
    }
    // Passes and waits, in the order they began.
    let mut items: Vec<(i64, Item<'_>)> = timeline.passes.iter().map(|p| (p.started_ms, Item::Pass(p))).collect();
    items.extend(timeline.waits.iter().map(|w| (w.started_ms, Item::Wait(w))));
    items.sort_by_key(|(at, item)| (*at, matches!(item, Item::Pass(_))));
    for (_, item) in items {
        match item {
            Item::Pass(pass) => pass_text(&mut out, pass),
            Item::Wait(wait) => wait_text(&mut out, wait),
        }
    }
    out
}

enum Item<'t> {
    Pass(&'t Pass),
    Wait(&'t Wait),
}

fn took(ms: Option<i64>) -> String {
    ms.map_or_else(|| "…".to_string(), human_duration)
}

fn pass_text(out: &mut String, pass: &Pass) {
    let owner = pass.owner.as_deref().map(|o| format!("  on {}", escape(o, Lines::Flatten))).unwrap_or_default();
    let _ = writeln!(
        out,
        "  pass {}  {}  {}  {}{owner}",
        pass.number,
        time(pass.started_ms),
        took(pass.duration_ms),
        pass.outcome
    );
    for step in &pass.steps {
        match step {
            Step::Turn(t) => {
                let finish = t.finish.as_deref().unwrap_or("?");
                let _ = writeln!(
                    out,
                    "    turn {}  {}  {} in / {} out tokens  {finish}, {} tool call{}",
                    t.number,
                    took(t.duration_ms),
                    t.input_tokens,
                    t.output_tokens,
                    t.tool_calls,
                    if t.tool_calls == 1 { "" } else { "s" }
                );
                if let Some(e) = &t.error {
                    let _ = writeln!(out, "      error: {}", escape(e, Lines::Flatten));
                }
            }
            Step::ToolCall(c) => call_text(out, "tool", c),
            Step::McpCall(c) => call_text(out, "mcp", c),
            Step::HostCall(c) => call_text(out, "call", c),
        }
    }
}

fn call_text(out: &mut String, what: &str, call: &Call) {
    let id = call.id.as_deref().map(|id| format!(" ({})", escape(id, Lines::Flatten))).unwrap_or_default();
    let verdict = call.verdict.as_deref().unwrap_or(if call.error { "error" } else { "ok" });
    let _ =
        writeln!(out, "    {what} {}{id}  {}  {verdict}", escape(&call.name, Lines::Flatten), took(call.duration_ms));
    if let Some(arguments) = &call.arguments {
        let text = serde_json::to_string_pretty(arguments).unwrap_or_default();
        block(out, "arguments", &text);
    }
    if let Some(result) = &call.result {
        block(out, if call.error { "error" } else { "result" }, result);
    }
}

/// `label:` then `text`, indented under it, whole.
fn block(out: &mut String, label: &str, text: &str) {
    let _ = writeln!(out, "      {label}:");
    for line in escape(text, Lines::Keep).lines() {
        let _ = writeln!(out, "        {line}");
    }
}

fn wait_text(out: &mut String, wait: &Wait) {
    let kind = match wait.kind {
        nexo::runs::timeline::WaitKind::Start => "to start",
        nexo::runs::timeline::WaitKind::Approval => "approval",
        nexo::runs::timeline::WaitKind::Suspended => "suspended",
    };
    let mut what = String::new();
    if let Some(tool) = &wait.tool {
        let _ = write!(what, "  `{}`", escape(tool, Lines::Flatten));
    }
    if let Some(capability) = &wait.capability {
        let _ = write!(what, " ({})", escape(capability, Lines::Flatten));
    }
    if let Some(decision) = &wait.decision {
        let _ = write!(what, " {decision}");
    }
    if wait.tool.is_none()
        && let Some(reason) = &wait.reason
    {
        let _ = write!(what, "  {}", escape(reason, Lines::Flatten));
    }
    let _ = writeln!(out, "  wait {kind}  {}  {}{what}", time(wait.started_ms), took(wait.duration_ms));
    // An approval's reason says why it was asked (a command rule, the data-flow guard).
    if wait.tool.is_some()
        && let Some(reason) = &wait.reason
    {
        block(out, "why", reason);
    }
    if let Some(arguments) = &wait.arguments {
        block(out, "arguments", &serde_json::to_string_pretty(arguments).unwrap_or_default());
    }
}

/// A timestamp as UTC, to the second.
pub fn time(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(at).to_string()
}
