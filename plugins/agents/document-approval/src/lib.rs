//! A durable workflow: draft a document with the model (paid for once),
//! pause until a person approves it, then publish it into the workspace.
//!
//! ```text
//! nexo run document-approval.wasm "quarterly report" --sandbox local --allow write --mode auto
//! # … suspended: awaiting approval; run r… is paused
//! nexo runs resume r… --input '{"approved": true}'
//! ```
//!
//! The draft is a checkpoint, so a resume never asks the model again. The
//! `suspend` call returns once the run is resumed; the resume input says
//! whether the document was approved.

use nexo_sdk::agent::durable::{checkpoint, from_json_string, json_string, resume_input, suspend_with_key};
use nexo_sdk::agent::{tools, Agent, Capability, Manifest, RunError};

struct DocumentApproval;

fn approved(input: &str) -> bool {
    let compact: String = input.chars().filter(|c| !c.is_whitespace()).collect();
    compact.contains("\"approved\":true")
}

fn slug(title: &str) -> String {
    let s: String =
        title.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect();
    s.split('-').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("-")
}

impl Agent for DocumentApproval {
    fn manifest() -> Manifest {
        Manifest::new("document-approval", "Drafts a document, waits for approval, then publishes it")
            .instructions("You write short, clear business documents. Answer with the document only.")
            .capabilities([Capability::Read, Capability::Write])
    }

    fn run(title: String) -> Result<String, RunError> {
        let draft = checkpoint("draft", || {
            let reply = nexo_sdk::agent::prompt(&format!("Draft a one-paragraph document titled: {title}"))?;
            Ok(json_string(&reply.text))
        })?;
        let draft = from_json_string(&draft).unwrap_or(draft);
        if !resume_input().is_some_and(|i| approved(&i)) {
            suspend_with_key("awaiting approval", &slug(&title))?;
            // Resumed: the operator's input decides.
            if !resume_input().is_some_and(|i| approved(&i)) {
                return Ok(format!("not published: `{title}` was not approved"));
            }
        }
        let path = format!("published/{}.md", slug(&title));
        checkpoint("publish", || {
            tools::write_file(&path, &format!("# {title}\n\n{draft}\n"))
                .map_err(|e| RunError::Failed(format!("cannot publish: {e:?}")))?;
            Ok(json_string(&path))
        })?;
        Ok(format!("published {path}"))
    }
}

nexo_sdk::export_agent!(DocumentApproval);
