//! What `nexo run` shows while an agent works: a spinner while the model
//! thinks and one line per tool call on a terminal; plain lines otherwise;
//! JSON lines with `--json`.

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
            Event::TextDelta { .. } => {}
            Event::Done { .. } => self.finish(),
        }
    }
}
