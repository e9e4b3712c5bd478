//! The container sandbox: an agent's tools run inside a throwaway OCI
//! container, driven through the `docker` or `podman` CLI (or Apple's
//! `container` CLI). Podman is tested against a real engine
//! (`sandbox/tests/podman.rs`); Docker and Apple's CLI against a fake.
//!
//! Every call is a separate CLI process built from an argv array; no shell
//! ever sees a string assembled from a tool's arguments. Paths are checked
//! lexically against the working directory before anything runs, and file
//! paths reach the container as single argv elements (the write script takes
//! its path as `$1`).
//!
//! The container starts lazily on the first tool call and is hardened by
//! default: no network, every capability dropped, a read-only root with a
//! tmpfs scratch at the working directory, `no-new-privileges`, and a pids
//! limit. Each default is loosened by one field of [`ContainerConfig`]. The
//! engine's init runs as PID 1 (`--init`), so what a command leaves in the
//! background is reaped. An ephemeral container is tied to this process
//! (`lifecycle.rs`): when it ends without closing the sandbox, the container
//! stops and the engine removes it.
//!
//! Apple's `container` CLI is driven with the same Docker-shaped flags; that
//! mapping is unverified, and reconnecting (which needs an exact label
//! filter) is refused for it.
//!
//! Every CLI call runs under the supervisor the local shell uses too
//! (`process.rs`). A command that runs past its timeout has its CLI process
//! (and the CLI's process group) killed; `docker exec` does not forward that,
//! so the process inside the container may go on until the container is
//! removed.

mod binary;
mod cli;
mod config;
mod files;
mod lifecycle;
mod sandbox;
#[cfg(test)]
mod tests;
mod tools;
mod validate;

pub use binary::find_on_path;
pub use config::{Bind, ContainerConfig, DEFAULT_CWD, DEFAULT_PIDS_LIMIT, Network, Runtime};
pub use lifecycle::CONTAINER_LABEL;
pub use sandbox::ContainerSandbox;
