//! What the workspace's tests share: saying that a test, or a part of one,
//! did not run. libtest hides a passing test's output, so a skip printed
//! alone goes unseen; [`skipped`] also appends it to the file `NEXO_SKIPPED`
//! names, which `make test` sets and lists at its end. [`podman::image`]
//! finds the real container engine the container sandbox's tests run on;
//! [`llama`] runs a real llama.cpp server for the OpenAI-compatible
//! provider's live tests; [`otlp::Receiver`] is a real OTLP/HTTP receiver
//! for the telemetry tests.

use std::io::Write;

pub mod llama;
pub mod otlp;
pub mod podman;
pub mod registry;

/// Says that `test` (or a part of it) did not run, and `why`: on stderr,
/// and as a line appended to the file `NEXO_SKIPPED` names, when it is set.
pub fn skipped(test: &str, why: &str) {
    let line = format!("skipped: {test}: {why}\n");
    eprint!("{line}");
    if let Some(path) = std::env::var_os("NEXO_SKIPPED")
        && let Ok(mut file) = std::fs::OpenOptions::new().create(true).append(true).open(path)
    {
        // One write of one short line: tests in other processes append beside it.
        let _ = file.write_all(line.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_skip_is_written_where_nexo_skipped_says() {
        // The variable is set for a child process only: no set_var in a threaded test.
        if let Some(path) = std::env::var_os("NEXO_TESTKIT_CHILD") {
            super::skipped("child", "asked to");
            assert_eq!(std::env::var_os("NEXO_SKIPPED"), Some(path));
            return;
        }
        let dir = std::env::temp_dir().join(format!("nexo-testkit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let file = dir.join("skipped.txt");
        let run = std::process::Command::new(std::env::current_exe().unwrap_or_else(|e| panic!("{e}")))
            .args(["--exact", "tests::a_skip_is_written_where_nexo_skipped_says", "--nocapture"])
            .env("NEXO_SKIPPED", &file)
            .env("NEXO_TESTKIT_CHILD", &file)
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        let written = std::fs::read_to_string(&file).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(written, "skipped: child: asked to\n");
    }
}
