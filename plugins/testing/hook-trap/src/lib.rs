//! A hook that describes itself and then traps at every question about a
//! call: what a broken hook looks like to the host, which must fail closed.
//! It is not asked about prompts, so a run can go on to read the refusals.

use nexo_sdk::hook::{After, Before, Event, Hook, Info, Prompt, PromptDecision, ToolCall};

struct HookTrap;

impl Hook for HookTrap {
    fn info() -> Info {
        Info::new("hook-trap", "Traps at every question about a call")
            .on(&[Event::BeforeToolCall, Event::AfterToolCall])
    }

    fn before_tool_call(_call: ToolCall) -> Before {
        panic!("hook-trap traps before a call")
    }

    fn after_tool_call(_call: ToolCall, _output: String, _is_error: bool) -> After {
        panic!("hook-trap traps after a call")
    }

    fn before_prompt(_prompt: Prompt) -> PromptDecision {
        panic!("hook-trap traps before a prompt")
    }
}

nexo_sdk::export_hook!(HookTrap);
