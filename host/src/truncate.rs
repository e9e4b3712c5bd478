//! The one place text is cut before it reaches a model: shell output keeps
//! its end ([`truncate`]), fetched pages and search snippets keep their start
//! ([`head_chars`], [`head_bytes`]). One module, so every cut is marked the
//! same way and a long page or a noisy command cannot flood a small context
//! window.
//!
//! The routine lives in the `nexo-text` crate, so the sandbox cuts command
//! and container output with the same code ([`capped_output`]); this module
//! keeps `crate::truncate::…` paths working.

pub use nexo_text::*;
