//! Builds plugin crates into WebAssembly components.
//!
//! Two toolchains can build the `wasm32-wasip2` target:
//!
//! - **rustup**, where `rustup target add wasm32-wasip2` installed the target's
//!   standard library;
//! - **Debian's** `rustc-web`, which ships the standard library as source and
//!   builds it with `-Zbuild-std` (packages `rustc-web cargo-web rust-web-src
//!   rust-web-llvm lld-22 wasi-libc`).
//!
//! [`Toolchain::detect`] prefers rustup and falls back to Debian. Set
//! `NEXO_WASM_TOOLCHAIN=rustup` or `=debian` to force one. The crate is plain
//! `std`, so the host's CLI (`nexo build`) and the test build script share it.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The compilation target for every nexo plugin.
pub const TARGET: &str = "wasm32-wasip2";

/// What to install when no toolchain is found.
pub const INSTALL_HINT: &str = "no Rust toolchain can build wasm32-wasip2 components here. Either run \
`rustup target add wasm32-wasip2`, or on Debian install the packages \
`rustc-web cargo-web rust-web-src rust-web-llvm lld-22 wasi-libc` \
(`make toolchain` in the nexo repository does that)";

const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const DEBIAN_CARGO: &str = "/usr/bin/cargo";
const DEBIAN_STD_SRC: &str = "/usr/lib/rustlib/src/rust/library";
const DEBIAN_WASI_LIBC: &str = "/usr/lib/wasm32-wasi";

/// A toolchain that can build `wasm32-wasip2` components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Toolchain {
    /// rustup's toolchain with the target installed; `cargo` from `PATH`.
    Rustup,
    /// Debian's `rustc-web`, building the standard library from source.
    Debian,
}

/// Why a build could not run or did not succeed.
#[derive(Debug)]
pub enum BuildError {
    /// No usable toolchain was found; the message says what to install.
    NoToolchain(String),
    /// `cargo` could not be started.
    Spawn(std::io::Error),
    /// `cargo` ran and failed.
    Failed {
        /// The package that failed, if one was named.
        package: Option<String>,
        /// The exit status as text.
        status: String,
        /// The compiler's first error and where it points
        /// (`error[E0308]: mismatched types at src/lib.rs:12:18`), when
        /// cargo printed one.
        first_error: Option<String>,
    },
    /// The build succeeded but the expected artifact is missing.
    MissingArtifact(PathBuf),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::NoToolchain(msg) => f.write_str(msg),
            BuildError::Spawn(e) => write!(f, "could not start cargo: {e}"),
            BuildError::Failed { package, status, first_error } => {
                match package {
                    Some(p) => write!(f, "building plugin `{p}` failed ({status})")?,
                    None => write!(f, "building the plugin failed ({status})")?,
                }
                match first_error {
                    Some(first) => write!(f, ": {first}; the whole compiler output is above"),
                    None => write!(f, "; see the compiler output above"),
                }
            }
            BuildError::MissingArtifact(p) => write!(
                f,
                "the build finished but {} is missing: is the crate a `cdylib` (`[lib] crate-type = [\"cdylib\"]`)?",
                p.display()
            ),
        }
    }
}

impl std::error::Error for BuildError {}

impl Toolchain {
    /// Finds a toolchain, honouring `NEXO_WASM_TOOLCHAIN`.
    pub fn detect() -> Result<Toolchain, BuildError> {
        match std::env::var("NEXO_WASM_TOOLCHAIN").ok().as_deref() {
            Some("rustup") if rustup_has_target() => Ok(Toolchain::Rustup),
            Some("rustup") => Err(BuildError::NoToolchain(
                "NEXO_WASM_TOOLCHAIN=rustup, but rustup's toolchain lacks wasm32-wasip2: run `rustup target add wasm32-wasip2`".into(),
            )),
            Some("debian") if debian_available() => Ok(Toolchain::Debian),
            Some("debian") => Err(BuildError::NoToolchain(
                "NEXO_WASM_TOOLCHAIN=debian, but Debian's rustc-web is incomplete: install `rustc-web cargo-web rust-web-src rust-web-llvm lld-22 wasi-libc`".into(),
            )),
            Some(other) if !other.is_empty() => Err(BuildError::NoToolchain(format!(
                "NEXO_WASM_TOOLCHAIN={other} is not a known toolchain: use `rustup` or `debian`"
            ))),
            _ if rustup_has_target() => Ok(Toolchain::Rustup),
            _ if debian_available() => Ok(Toolchain::Debian),
            _ => Err(BuildError::NoToolchain(INSTALL_HINT.into())),
        }
    }

    /// A `cargo build --release --target wasm32-wasip2` command for the crate
    /// or workspace at `manifest_path`, with a clean environment.
    pub fn cargo_build(&self, manifest_path: &Path) -> Command {
        let mut cmd = match self {
            Toolchain::Rustup => Command::new("cargo"),
            Toolchain::Debian => Command::new(DEBIAN_CARGO),
        };
        scrub_env(&mut cmd);
        cmd.arg("build").arg("--release").arg("--target").arg(TARGET);
        cmd.arg("--manifest-path").arg(manifest_path);
        if *self == Toolchain::Debian {
            cmd.env("RUSTC", DEBIAN_RUSTC)
                .env("RUSTC_BOOTSTRAP", "1")
                .env("RUSTFLAGS", format!("-C link-self-contained=no -L {DEBIAN_WASI_LIBC}"))
                .arg("-Zbuild-std=std,panic_abort");
        }
        cmd
    }
}

/// Builds one package of the workspace at `manifest_path` into `target_dir`,
/// and returns the path of the component. The compiler's output goes to this
/// process's standard error.
pub fn build_package(
    toolchain: &Toolchain,
    manifest_path: &Path,
    package: Option<&str>,
    target_dir: &Path,
) -> Result<PathBuf, BuildError> {
    let mut cmd = toolchain.cargo_build(manifest_path);
    cmd.arg("--target-dir").arg(target_dir);
    if let Some(p) = package {
        cmd.arg("-p").arg(p);
    }
    // Build scripts read `cargo:` lines from stdout, so keep stdout clean.
    cmd.stdout(Stdio::from(std::io::stderr()));
    // The output is read on its way through, to quote the first error; keep
    // its colours when it ends on a terminal.
    let color = if std::io::IsTerminal::is_terminal(&std::io::stderr()) { "always" } else { "never" };
    cmd.arg("--color").arg(color).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(BuildError::Spawn)?;
    let scan =
        child.stderr.take().map(|pipe| std::thread::spawn(move || forward_and_find_error(pipe, std::io::stderr())));
    let status = child.wait().map_err(BuildError::Spawn)?;
    let first_error = scan.and_then(|t| t.join().ok()).flatten();
    if !status.success() {
        return Err(BuildError::Failed { package: package.map(String::from), status: status.to_string(), first_error });
    }
    let name = match package {
        Some(p) => p.to_string(),
        None => package_name(manifest_path).unwrap_or_default(),
    };
    let artifact = artifact_path(target_dir, &name);
    if artifact.is_file() { Ok(artifact) } else { Err(BuildError::MissingArtifact(artifact)) }
}

/// Copies cargo's output to `err` (this process's stderr), and returns its
/// first compiler error with the location the next `-->` line gives.
fn forward_and_find_error(pipe: impl std::io::Read, mut err: impl std::io::Write) -> Option<String> {
    use std::io::BufRead;
    let (mut first, mut pending) = (None, None::<String>);
    for line in std::io::BufReader::new(pipe).split(b'\n').map_while(Result::ok) {
        let _ = err.write_all(&line);
        let _ = err.write_all(b"\n");
        if first.is_some() {
            continue;
        }
        let plain = strip_ansi(&String::from_utf8_lossy(&line));
        let text = plain.trim();
        if let Some(location) = text.strip_prefix("--> ") {
            if let Some(message) = pending.take() {
                first = Some(format!("{message} at {location}"));
            }
        } else if text.starts_with("error") && !text.starts_with("error: could not compile") {
            pending.get_or_insert_with(|| text.to_string());
        }
    }
    first.or(pending)
}

/// `text` without ANSI colour sequences (`ESC [ … m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // Skip to the end of the sequence: a letter after `[`.
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Toolchain {
    /// Whether a build into `target_dir` first builds the standard library
    /// from source (Debian's toolchain, where `target_dir` holds none yet):
    /// minutes, once per target directory.
    pub fn builds_std_in(&self, target_dir: &Path) -> bool {
        if *self != Toolchain::Debian {
            return false;
        }
        let deps = target_dir.join(TARGET).join("release").join("deps");
        let built = std::fs::read_dir(deps).into_iter().flatten().filter_map(Result::ok).any(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("libstd-") && name.ends_with(".rlib")
        });
        !built
    }
}

/// Where cargo puts the component of package `name`.
pub fn artifact_path(target_dir: &Path, name: &str) -> PathBuf {
    target_dir.join(TARGET).join("release").join(format!("{}.wasm", name.replace('-', "_")))
}

/// Reads `[package] name` from a `Cargo.toml`, without a TOML parser: the
/// first `name = "…"` line after `[package]`.
pub fn package_name(manifest_path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(manifest_path).ok()?;
    let mut in_package = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if in_package && let Some(rest) = line.strip_prefix("name") {
            let value = rest.trim_start().strip_prefix('=')?.trim();
            return Some(value.trim_matches('"').to_string());
        }
    }
    None
}

fn rustup_has_target() -> bool {
    let Ok(out) =
        Command::new("rustc").args(["--print", "target-libdir", "--target", TARGET]).stderr(Stdio::null()).output()
    else {
        return false;
    };
    // rustc prints a path even when the target is missing; look inside it.
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    std::fs::read_dir(dir)
        .map(|entries| entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with("libstd-")))
        .unwrap_or(false)
}

fn debian_available() -> bool {
    [DEBIAN_RUSTC, DEBIAN_CARGO, DEBIAN_STD_SRC, DEBIAN_WASI_LIBC].iter().all(|p| Path::new(p).exists())
}

/// Removes what an outer cargo (a build script's parent) sets, so the nested
/// build behaves as if run from a shell.
fn scrub_env(cmd: &mut Command) {
    const EXACT: &[&str] = &[
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTDOC",
        "RUSTFLAGS",
        "RUSTC_BOOTSTRAP",
        "TARGET",
        "HOST",
        "OPT_LEVEL",
        "PROFILE",
        "DEBUG",
        "NUM_JOBS",
        "MAKEFLAGS",
        "CARGO_MAKEFLAGS",
        "OUT_DIR",
    ];
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        let keep = k == "CARGO_HOME" || k.starts_with("CARGO_NET_") || k.starts_with("CARGO_HTTP_");
        let drop = EXACT.contains(&k.as_ref())
            || (k.starts_with("CARGO") && !keep)
            || k.starts_with("DEP_")
            || k.starts_with("RUSTC_");
        if drop {
            cmd.env_remove::<OsString>(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_debians_first_build_in_a_target_directory_builds_the_standard_library() {
        let dir = tempfile_dir();
        assert!(Toolchain::Debian.builds_std_in(&dir), "an empty target directory");
        assert!(!Toolchain::Rustup.builds_std_in(&dir), "rustup ships it built");
        let deps = dir.join(TARGET).join("release").join("deps");
        std::fs::create_dir_all(&deps).unwrap();
        std::fs::write(deps.join("libcore-0123.rlib"), b"").unwrap();
        assert!(Toolchain::Debian.builds_std_in(&dir), "core alone is not std");
        std::fs::write(deps.join("libstd-0123.rlib"), b"").unwrap();
        assert!(!Toolchain::Debian.builds_std_in(&dir), "built once, not again");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A fresh directory of this test's own (the crate is plain `std`).
    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nexo-toolchain-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_first_error_is_quoted_with_its_location() {
        let output = "   Compiling broken v0.1.0 (/w/broken)\n\
                      \x1b[0m\x1b[1m\x1b[38;5;9merror[E0308]\x1b[0m\x1b[1m: mismatched types\x1b[0m\n\
                      \x1b[0m  \x1b[0m\x1b[1m\x1b[38;5;12m--> \x1b[0msrc/lib.rs:12:18\n\
                      error[E0425]: cannot find value `y` in this scope\n\
                      \x20 --> src/lib.rs:20:5\n\
                      error: could not compile `broken` (lib) due to 2 previous errors\n";
        let mut forwarded = Vec::new();
        let first = forward_and_find_error(output.as_bytes(), &mut forwarded);
        assert_eq!(first.as_deref(), Some("error[E0308]: mismatched types at src/lib.rs:12:18"));
        assert_eq!(forwarded, output.as_bytes(), "the whole output passes through unchanged");
    }

    #[test]
    fn an_error_without_a_location_is_still_quoted() {
        let output = "error: failed to parse manifest at `/w/Cargo.toml`\n";
        assert_eq!(
            forward_and_find_error(output.as_bytes(), std::io::sink()).as_deref(),
            Some("error: failed to parse manifest at `/w/Cargo.toml`")
        );
        assert_eq!(forward_and_find_error("   Compiling x\n".as_bytes(), std::io::sink()), None);
    }

    #[test]
    fn the_message_names_the_error() {
        let e = BuildError::Failed {
            package: Some("broken".into()),
            status: "exit status: 101".into(),
            first_error: Some("error[E0308]: mismatched types at src/lib.rs:12:18".into()),
        };
        assert_eq!(
            e.to_string(),
            "building plugin `broken` failed (exit status: 101): error[E0308]: mismatched types at src/lib.rs:12:18; \
             the whole compiler output is above"
        );
    }
}
