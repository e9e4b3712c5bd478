//! Runs a script of host calls, one per `;`-separated op, for the durable
//! tests. Each op's result is one line of the answer; a failed op's line
//! starts with `error:`.
//!
//! - `prompt TEXT`, `shell CMD`, `write PATH TEXT`, `read PATH`
//! - `checkpoint NAME TEXT`: a checkpoint whose work prompts TEXT
//! - `all NAME=prompt:TEXT,NAME=read:PATH`: `checkpoint_all`
//! - `suspend REASON`: suspends; the line is the resume input
//! - `sleep MS`: a durable timer
//! - `signal NAME [TIMEOUT_MS]`: waits for a signal; the line is its data,
//!   or `none`
//! - `child AGENT [allow=CAP,CAP] [mode=MODE] INPUT`: runs AGENT as a
//!   child run on INPUT (`|` in it stands for `;`); the line is its outcome
//! - `branch PATH`: reads PATH through the preopen (not journaled); `a`
//!   prompts, anything else calls `read` on it
//! - `suspend-in-checkpoint`, `reserved NAME`, `time`, `random`
//!
//! `!OP` fails the run when OP fails.

use std::fmt::Write as _;

use nexo_sdk::agent::bindings::nexo::plugin::durable as raw;
use nexo_sdk::agent::durable::{self, checkpoint, checkpoint_all, json_string, prompt_step, resume_input, tool_step};
use nexo_sdk::agent::{prompt, tools, Agent, Capability, Manifest, RunError};

struct WorkflowProbe;

fn op(line: &str) -> Result<String, String> {
    let (name, rest) = line.trim().split_once(' ').unwrap_or((line.trim(), ""));
    match name {
        "prompt" => prompt(rest).map(|r| r.text).map_err(|e| format!("{e:?}")),
        "shell" => {
            tools::shell(rest).map(|o| format!("{}:{}", o.status, o.stdout.trim())).map_err(|e| format!("{e:?}"))
        }
        "write" => {
            let (path, text) = rest.split_once(' ').unwrap_or((rest, ""));
            tools::write_file(path, text).map(|()| format!("wrote {path}")).map_err(|e| format!("{e:?}"))
        }
        "read" => tools::read_file(rest).map_err(|e| format!("{e:?}")),
        "checkpoint" => {
            let (cp, text) = rest.split_once(' ').unwrap_or((rest, ""));
            checkpoint(cp, || Ok(json_string(&prompt(text)?.text))).map_err(|e| format!("{e:?}"))
        }
        "all" => {
            let steps: Vec<_> = rest
                .split(',')
                .filter_map(|item| {
                    let (n, action) = item.split_once('=')?;
                    Some(match action.split_once(':') {
                        Some(("read", path)) => {
                            tool_step(n, "read_file", &format!("{{\"path\":{}}}", json_string(path)))
                        }
                        Some((_, text)) => prompt_step(n, text),
                        None => prompt_step(n, action),
                    })
                })
                .collect();
            let map = checkpoint_all(&steps).map_err(|e| format!("{e:?}"))?;
            Ok(map.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(","))
        }
        "suspend" => durable::suspend(rest)
            .map(|()| format!("resumed with {}", resume_input().unwrap_or_default()))
            .map_err(|e| format!("{e:?}")),
        "sleep" => {
            let ms: u64 = rest.trim().parse().map_err(|_| format!("sleep wants milliseconds, not `{rest}`"))?;
            durable::sleep(std::time::Duration::from_millis(ms))
                .map(|()| format!("slept {ms}"))
                .map_err(|e| format!("{e:?}"))
        }
        "signal" => {
            // `signal NAME [TIMEOUT_MS]`
            let (signal, timeout) = rest.trim().split_once(' ').unwrap_or((rest.trim(), ""));
            let timeout = match timeout.trim() {
                "" => None,
                ms => Some(std::time::Duration::from_millis(
                    ms.parse().map_err(|_| format!("signal wants a timeout in milliseconds, not `{ms}`"))?,
                )),
            };
            durable::wait_signal(signal, timeout)
                .map(|got| match got {
                    Some(data) => format!("signal {signal}: {data}"),
                    None => format!("signal {signal}: none"),
                })
                .map_err(|e| format!("{e:?}"))
        }
        "child" => {
            let (agent, mut rest) = rest.trim().split_once(' ').unwrap_or((rest.trim(), ""));
            let mut narrowing = durable::GrantNarrowing::default();
            loop {
                rest = rest.trim_start();
                if let Some(after) = rest.strip_prefix("allow=") {
                    let (list, more) = after.split_once(' ').unwrap_or((after, ""));
                    narrowing.allow = Some(list.split(',').filter(|c| !c.is_empty()).map(String::from).collect());
                    rest = more;
                } else if let Some(after) = rest.strip_prefix("mode=") {
                    let (mode, more) = after.split_once(' ').unwrap_or((after, ""));
                    narrowing.mode = Some(mode.to_string());
                    rest = more;
                } else {
                    break;
                }
            }
            let input = rest.replace('|', ";");
            durable::run_agent(agent, &input, &narrowing)
                .map(|outcome| match outcome {
                    durable::ChildOutcome::Done(answer) => format!("child done: {answer}"),
                    durable::ChildOutcome::Failed(error) => format!("child failed: {error}"),
                    durable::ChildOutcome::Cancelled(why) => format!("child cancelled: {why}"),
                })
                .map_err(|e| format!("{e:?}"))
        }
        "branch" => {
            let text = std::fs::read_to_string(rest).map_err(|e| e.to_string())?;
            if text.trim() == "a" {
                prompt("branch a").map(|r| r.text).map_err(|e| format!("{e:?}"))
            } else {
                tools::read_file(rest).map_err(|e| format!("{e:?}"))
            }
        }
        "suspend-in-checkpoint" => {
            let _ = raw::checkpoint_begin("open").map_err(|e| e.to_string())?;
            let refused = durable::suspend("inside").map_err(|e| format!("{e:?}"));
            raw::checkpoint_end("open", "1").map_err(|e| e.to_string())?;
            refused.map(|()| "suspended inside a checkpoint".to_string())
        }
        "reserved" => checkpoint(rest, || Ok("1".into())).map_err(|e| format!("{e:?}")),
        "time" => {
            Ok(format!("{:?}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default()))
        }
        "random" => {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            std::hash::Hasher::write_u8(&mut h, 1);
            let s = std::collections::hash_map::RandomState::new();
            Ok(format!("{}", std::hash::BuildHasher::hash_one(&s, 7u8)))
        }
        other => Err(format!("unknown op `{other}`")),
    }
}

impl Agent for WorkflowProbe {
    fn manifest() -> Manifest {
        Manifest::new("workflow-probe", "Runs a script of durable host calls").capabilities([
            Capability::Read,
            Capability::Glob,
            Capability::Write,
            Capability::Shell,
        ])
    }

    // Offered to its model as `agent__probe` where the operator makes
    // `probe` available (the agents-as-tools tests).
    fn agents() -> Vec<String> {
        vec!["probe".into()]
    }

    fn run(input: String) -> Result<String, RunError> {
        let mut out = String::new();
        for line in input.split(';').filter(|l| !l.trim().is_empty()) {
            // `!OP` fails the run when OP fails.
            let (strict, line) = match line.trim().strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, line),
            };
            match op(line) {
                Ok(v) => writeln!(out, "{v}"),
                Err(e) if strict => return Err(RunError::Failed(e)),
                Err(e) => writeln!(out, "error: {e}"),
            }
            .ok();
        }
        Ok(out.trim_end().to_string())
    }
}

nexo_sdk::export_agent!(WorkflowProbe);
