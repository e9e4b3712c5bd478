//! The `log` import: a plugin's lines in the host's log, tagged with its
//! name, through the host-call path like every other import. Each line is
//! cut at the run's line limit (by the one truncation routine) and at most
//! the run's number of lines is kept.

use nexo_model::BoxFuture;
use wasmtime::component::Linker;

use crate::bindings::agent::nexo::plugin::log::Level;
use crate::error::ToolError;
use crate::host_call::{CallContext, HostCall, guest_now};
use crate::instance::Host;

/// `log`: one line at a level.
#[derive(Debug, Clone, Copy)]
pub struct Log;

impl<Cx: CallContext> HostCall<Cx> for Log {
    type Args = (Level, String);
    type Output = ();
    type Error = ToolError;

    fn name(&self) -> &'static str {
        "log"
    }

    fn effect(&self) -> crate::journal::Effect {
        crate::journal::Effect::Skip
    }

    fn execute<'a>(&'a self, cx: &'a Cx, (level, message): (Level, String)) -> BoxFuture<'a, Result<(), ToolError>> {
        Box::pin(async move {
            let budget = cx.log();
            let Some(n) = budget.take() else { return Ok(()) };
            let (cut, was_cut) = crate::truncate::head_str(&message, budget.line_bytes);
            let message: std::borrow::Cow<'_, str> =
                if was_cut { format!("{cut} …[cut]").into() } else { cut.into() };
            let plugin = cx.plugin();
            match level {
                Level::Trace => tracing::trace!(target: "nexo::plugin", plugin, "{message}"),
                Level::Debug => tracing::debug!(target: "nexo::plugin", plugin, "{message}"),
                Level::Info => tracing::info!(target: "nexo::plugin", plugin, "{message}"),
                Level::Warn => tracing::warn!(target: "nexo::plugin", plugin, "{message}"),
                Level::Error => tracing::error!(target: "nexo::plugin", plugin, "{message}"),
            }
            if n == budget.max_lines {
                tracing::warn!(target: "nexo::plugin", plugin, "log line limit reached; dropping further lines");
            }
            Ok(())
        })
    }
}

crate::guest_only!(for<Cx: CallContext> Log, Cx);

/// Adds `log` to a world's linker; `context` finds the call context in the
/// world's state.
pub fn link<W: Send + 'static, Cx: CallContext>(
    linker: &mut Linker<Host<W>>,
    context: fn(&W) -> &Cx,
) -> wasmtime::Result<()> {
    // A sync import: logging never waits, and this is the hottest import there is.
    linker.instance(crate::manifest::interface::LOG)?.func_wrap(
        "log",
        move |store, (level, message): (Level, String)| {
            // A log line never fails the guest: a refused one is dropped.
            let _ = guest_now(context(&store.data().world), &Log, (level, message));
            Ok(())
        },
    )
}
