//! The hook world: implement [`Hook`] and export it with
//! [`export_hook!`](crate::export_hook). A hook is the operator's check on
//! each call the gate decides on and each prompt: it imports nothing that
//! carries authority, so it can only answer, and its answers only narrow.
//!
//! ```ignore
//! use nexo_sdk::hook::{Before, Event, Hook, Info, ToolCall};
//!
//! struct NoPush;
//!
//! impl Hook for NoPush {
//!     fn info() -> Info {
//!         Info::new("no-push", "Refuses git push").on(&[Event::BeforeToolCall])
//!     }
//!
//!     fn before_tool_call(call: ToolCall) -> Before {
//!         if call.capability == "shell" && call.detail.starts_with("git push") {
//!             return Before::Deny("pushing is for humans here".into());
//!         }
//!         Before::Allow
//!     }
//! }
//!
//! nexo_sdk::export_hook!(NoPush);
//! ```

use alloc::string::String;
use alloc::vec::Vec;

/// Raw bindings generated from `wit/` for the `hook-plugin` world.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "nexo:plugin/hook-plugin",
        pub_export_macro: true,
        export_macro_name: "__export_hook_plugin",
        default_bindings_module: "nexo_sdk::hook::bindings",
        runtime_path: "nexo_sdk::__wit_bindgen::rt",
    });
}

pub use bindings::exports::nexo::plugin::hook::{
    After, Before, Event, HookInfo as Info, Origin, Prompt, PromptDecision, ToolCall,
};

/// A hook. Answer only the moments [`Hook::info`] names; the others keep
/// their defaults, which let everything pass.
pub trait Hook {
    /// The hook's name, description and the moments it wants.
    fn info() -> Info;

    /// Decides on a call before the gate does. Default: [`Before::Allow`],
    /// which leaves the call to the gate.
    fn before_tool_call(_call: ToolCall) -> Before {
        Before::Allow
    }

    /// Sees a call's result (its JSON) before the caller does. Default:
    /// [`After::Pass`].
    fn after_tool_call(_call: ToolCall, _output: String, _is_error: bool) -> After {
        After::Pass
    }

    /// Sees a prompt before the model does. Default: [`PromptDecision::Pass`].
    fn before_prompt(_prompt: Prompt) -> PromptDecision {
        PromptDecision::Pass
    }
}

impl Info {
    /// Info with a name and a description, asked about nothing yet.
    pub fn new(name: &str, description: &str) -> Self {
        Info { name: name.into(), description: description.into(), events: Vec::new() }
    }

    /// The same, asked about `events`.
    pub fn on(mut self, events: &[Event]) -> Self {
        self.events.extend_from_slice(events);
        self
    }
}

impl<T: Hook> bindings::exports::nexo::plugin::hook::Guest for T {
    fn info() -> Info {
        <T as Hook>::info()
    }

    fn before_tool_call(call: ToolCall) -> Before {
        <T as Hook>::before_tool_call(call)
    }

    fn after_tool_call(call: ToolCall, output: String, is_error: bool) -> After {
        <T as Hook>::after_tool_call(call, output, is_error)
    }

    fn before_prompt(prompt: Prompt) -> PromptDecision {
        <T as Hook>::before_prompt(prompt)
    }
}

/// Exports a type that implements [`Hook`] as this component's hook.
#[macro_export]
macro_rules! export_hook {
    ($ty:ident) => {
        $crate::hook::bindings::__export_hook_plugin!($ty);
    };
}
