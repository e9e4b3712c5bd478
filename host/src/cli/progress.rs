//! What `nexo run` shows while an agent works: a spinner while the model
//! thinks and one line per tool call on a terminal; plain lines otherwise;
//! JSON lines with `--json`. And a word on the long first steps (compiling
//! a large component, building the standard library), on a terminal or
//! with `-v`, on stderr only.

use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use nexo::agent_loop::{Event, EventSink};
use nexo::terminal::{Lines, escape};

/// Shows events to a person or a program.
pub enum Progress {
    /// A spinner and tool lines on stderr.
    Terminal(ProgressBar),
    /// Tool lines on stderr.
    Plain,
    /// One JSON object per event on stdout.
    Json(Mutex<std::io::Stdout>),
}

impl Progress {
    /// Picks the view: JSON when asked, a spinner on a terminal, else plain.
    pub fn new(json: bool) -> Progress {
        if json {
            return Progress::Json(Mutex::new(std::io::stdout()));
        }
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg}").unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            return Progress::Terminal(bar);
        }
        Progress::Plain
    }

    /// Clears the spinner before the answer is printed.
    pub fn finish(&self) {
        if let Progress::Terminal(bar) = self {
            bar.finish_and_clear();
        }
    }

    /// Runs `f` with the spinner hidden, for a question on the terminal.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match self {
            Progress::Terminal(bar) => bar.suspend(f),
            _ => f(),
        }
    }

    fn line(&self, text: String) {
        match self {
            Progress::Terminal(bar) => bar.println(escape(&text, Lines::Flatten)),
            Progress::Plain => {
                let _ = writeln!(std::io::stderr().lock(), "{}", escape(&text, Lines::Flatten));
            }
            Progress::Json(_) => {}
        }
    }
}

fn mark(verdict: &str) -> &'static str {
    match verdict {
        "allowed" => "✓",
        "approval-required" => "⏸",
        _ => "✗",
    }
}

fn short(value: &serde_json::Value) -> String {
    let text = match value {
        serde_json::Value::Object(map) if map.len() == 1 => {
            map.values().next().map(|v| v.to_string()).unwrap_or_default()
        }
        other => other.to_string(),
    };
    nexo::truncate::first_line(&text, 80)
}

impl EventSink for Progress {
    fn emit(&self, event: &Event) {
        if let Progress::Json(out) = self {
            if let Ok(line) = serde_json::to_string(event) {
                let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
                let _ = writeln!(out, "{}", nexo::terminal::json_safe(&line));
            }
            return;
        }
        match event {
            Event::TurnStarted { turn } => {
                if let Progress::Terminal(bar) = self {
                    bar.set_message(format!("thinking (turn {turn})"));
                    bar.enable_steady_tick(Duration::from_millis(100));
                }
            }
            Event::ToolCall { name, arguments, .. } => {
                if let Progress::Terminal(bar) = self {
                    bar.set_message(escape(&format!("{name} {}", short(arguments)), Lines::Flatten).into_owned());
                }
            }
            Event::ToolResult { name, verdict, summary, .. } => {
                self.line(format!("{} {name}: {verdict}  {summary}", mark(verdict)));
            }
            Event::Hook { hook, call, decision, detail, .. } => {
                self.line(format!("↳ hook {hook} on {call}: {decision}  {detail}"));
            }
            Event::Waiting { turn, seconds } => match self {
                Progress::Terminal(bar) => bar.set_message(format!("thinking (turn {turn}, {seconds} s)")),
                _ => self.line(format!("… the model is still working (turn {turn}, {seconds} s)")),
            },
            Event::TextDelta { .. } => {}
            Event::Done { .. } => self.finish(),
        }
    }
}

/// A component at least this large takes seconds to compile: on a terminal
/// its compile is announced even without `-v`.
const LARGE_COMPONENT: usize = 4 << 20;

/// Whether a long step is worth a word on stderr: on a terminal, or with
/// `-v` (stdout, and `--json` with it, never carries it).
pub fn tells_long_steps(verbose: u8) -> bool {
    verbose > 0 || std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// What the engine says before it compiles a component rather than load
/// it from the cache: every compile with `-v`, a large one on a terminal.
pub fn compile_notice(verbose: u8) -> Option<nexo::engine::CompileNotice> {
    if !tells_long_steps(verbose) {
        return None;
    }
    Some(nexo::engine::CompileNotice::new(move |bytes, cached| {
        if verbose > 0 || bytes >= LARGE_COMPONENT {
            nexo::terminal::eprint_line(&compiling(bytes, cached));
        }
    }))
}

/// The line that announces a compile of `bytes`.
fn compiling(bytes: usize, cached: bool) -> String {
    let size = if bytes >= 1_000_000 {
        format!("{} MB", bytes.div_ceil(1_000_000))
    } else {
        format!("{} kB", bytes.div_ceil(1_000))
    };
    if cached {
        format!("compiling component ({size}) — first load only, cached after")
    } else {
        format!("compiling component ({size}) — at every load, as the compile cache is off (--no-cache)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compile_says_its_size_and_whether_it_is_once_only() {
        assert_eq!(compiling(18_000_000, true), "compiling component (18 MB) — first load only, cached after");
        assert!(compiling(240_001, false).starts_with("compiling component (241 kB) — at every load"));
    }
}
