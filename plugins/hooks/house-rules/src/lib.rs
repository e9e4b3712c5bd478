//! A hook with a project's house rules, as an operator would write one: it
//! sees each call the gate decides on and each prompt, and holds no
//! authority of its own.
//!
//! - `rm` in the shell is refused; `git push` needs someone's decision.
//! - A read or write under `drafts/` goes to `reviewed/` instead.
//! - Anything under `secrets/` is refused.
//! - An API token (`sk-…`) is redacted from results and prompts; a result
//!   marked `CONFIDENTIAL` is replaced.
//!
//! Markers let tests see it fail closed: arguments holding `HOOK-TRAP`
//! make it trap, `HOOK-SPIN` run past its deadline, and a prompt holding
//! `HOOK-PROMPT-TRAP` trap before the prompt.

use nexo_sdk::hook::{After, Before, Event, Hook, Info, Prompt, PromptDecision, ToolCall};

struct HouseRules;

/// The `sk-…` tokens in `text`: the prefix and what follows up to a
/// character that cannot be in a token.
fn tokens(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("sk-") {
        let tail = &rest[at..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_')).unwrap_or(tail.len());
        let token = &tail[..end];
        if token.len() > 3 && !found.iter().any(|t| t == token) {
            found.push(token.to_string());
        }
        rest = &tail[end.max(3)..];
    }
    found
}

impl Hook for HouseRules {
    fn info() -> Info {
        Info::new("house-rules", "Refuses deletes and secrets, asks before a push, redacts API tokens").on(&[
            Event::BeforeToolCall,
            Event::AfterToolCall,
            Event::BeforePrompt,
        ])
    }

    fn before_tool_call(call: ToolCall) -> Before {
        if call.arguments.contains("HOOK-TRAP") {
            panic!("the house rules hook traps, as asked");
        }
        if call.arguments.contains("HOOK-SPIN") {
            let mut n: u64 = 0;
            loop {
                n = core::hint::black_box(n.wrapping_add(1));
            }
        }
        let command = call.detail.trim_start();
        if call.capability == "shell" && (command == "rm" || command.starts_with("rm ")) {
            return Before::Deny("the house rules forbid deleting files".into());
        }
        if call.capability == "shell" && command.contains("git push") {
            return Before::Ask("a push leaves the machine".into());
        }
        if call.detail.starts_with("secrets/") || call.detail.contains("/secrets/") {
            return Before::Deny("files under secrets/ are off limits".into());
        }
        if matches!(call.capability.as_str(), "read" | "write") && call.arguments.contains("drafts/") {
            return Before::Rewrite(call.arguments.replace("drafts/", "reviewed/"));
        }
        Before::Allow
    }

    fn after_tool_call(_call: ToolCall, output: String, _is_error: bool) -> After {
        if output.contains("CONFIDENTIAL") {
            return After::Replace("withheld: the file is marked confidential".into());
        }
        let found = tokens(&output);
        if found.is_empty() {
            After::Pass
        } else {
            After::Redact(found)
        }
    }

    fn before_prompt(prompt: Prompt) -> PromptDecision {
        if prompt.messages.contains("HOOK-PROMPT-TRAP") {
            panic!("the house rules hook traps before the prompt, as asked");
        }
        let mut found = tokens(&prompt.system);
        found.extend(tokens(&prompt.messages));
        if found.is_empty() {
            PromptDecision::Pass
        } else {
            PromptDecision::Redact(found)
        }
    }
}

nexo_sdk::export_hook!(HouseRules);
