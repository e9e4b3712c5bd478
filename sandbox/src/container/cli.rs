//! Running the container CLI (`docker`, `podman`, Apple's `container`):
//! one supervised process per call, built from an argv array.

use std::process::Command;
use std::time::Duration;

use super::sandbox::ContainerSandbox;
use crate::SandboxError;
use crate::process::{AfterExit, Job, OnTimeout, Outcome, Output as CliOutput, close_inherited_fds};

impl ContainerSandbox {
    /// Runs the CLI with `stdin` fed in, output capped at `cap` bytes per
    /// stream; `Ok(None)` means it ran past `timeout` and was killed with its
    /// process group.
    pub(crate) fn cli(
        &self,
        args: &[String],
        stdin: Option<&[u8]>,
        timeout: Duration,
        cap: usize,
    ) -> Result<Option<CliOutput>, SandboxError> {
        let mut command = Command::new(&self.binary);
        command.args(args);
        // The CLI gets none of the host's descriptors beyond its stdio.
        close_inherited_fds(&mut command);
        let job =
            Job { stdin, timeout, cap, on_timeout: OnTimeout::KillGroup, after_exit: AfterExit::KillGroupIfPipesHeld };
        let child = job
            .spawn(&mut command)
            .map_err(|e| SandboxError::Failed(format!("cannot run {}: {e}; check `binary`", self.binary.display())))?;
        match job.supervise(child)? {
            Outcome::Exited(out) => Ok(Some(out)),
            Outcome::TimedOut => Ok(None),
        }
    }

    /// Runs a bookkeeping or file command under `op_timeout`.
    pub(crate) fn op(&self, args: &[String], stdin: Option<&[u8]>, cap: usize) -> Result<CliOutput, SandboxError> {
        let out = self.cli(args, stdin, self.config.op_timeout, cap)?.ok_or_else(|| {
            SandboxError::Timeout(format!(
                "`{} {}` did not finish within {:?}; check that the container engine responds or raise `op_timeout`",
                self.config.runtime.binary_name(),
                args.first().map_or("", String::as_str),
                self.config.op_timeout
            ))
        })?;
        Ok(out)
    }
}

pub(crate) fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}
