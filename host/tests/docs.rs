//! Every console snippet in `README.md` and `docs/` runs here, against the
//! real `nexo` binary, and must print what the snippet shows.
//!
//! - A ```` ```console ```` block holds commands (`$ ` starts one; a line
//!   ending in `\` continues it) and, after each, its output (stdout and
//!   stderr as a terminal shows them). In the shown output `…` matches any
//!   text within a line, and a line of only `...` or `…` matches any lines.
//! - A command may fail only if the block's next command is `echo $?`, which
//!   shows the exit code.
//! - ```` ```console ignore: REASON ```` is shown but not run; the reason is
//!   required (a real OpenAI key, a container engine) and is printed.
//! - A `nexo` command in any other block is an error, so no command can
//!   escape the test by its fence; a synopsis goes in a ```` ```text ```` block,
//!   which holds no commands to type.
//!
//! Each document runs in one `bash`, in order, so a later snippet sees the
//! files, variables and runs an earlier one made. Its working directory is a
//! scratch directory holding a copy of `examples/`, the built plugins at
//! `target/plugins/` (where `make plugins` puts them) and, for short
//! snippets, each bundled plugin by its file name (`hello.wasm`), with
//! `agent.wasm` a copy of `hello.wasm` and `agent.toml` one of
//! `examples/offline/reviewer.toml`. `HOME` is a fresh directory, so the
//! store is new. Models are loopback servers speaking the OpenAI wire format
//! on the ports the docs name: 127.0.0.1:11434 (Ollama's default) and
//! 127.0.0.1:8080.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)] // a test should fail loudly

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use nexo_model::mock::{MockServer, Reply};

/// One command of a console block, with the output the document shows.
#[derive(Clone)]
struct Snippet {
    line: usize,
    command: String,
    shown: Vec<String>,
}

/// A document's console blocks, in order; and its errors of form.
#[derive(Default)]
struct Document {
    snippets: Vec<Vec<Snippet>>,
    ignored: Vec<(usize, String)>,
    errors: Vec<String>,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn documents() -> Vec<PathBuf> {
    let root = repo();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root.join("README.md"));
    docs
}

/// Whether a line of a non-console block runs `nexo` (after an optional
/// prompt and environment assignments).
fn runs_nexo(line: &str) -> bool {
    let line = line.trim_start().trim_start_matches("$ ");
    let mut words = line.split_whitespace().skip_while(|w| {
        w.split_once('=').is_some_and(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
    });
    words.next() == Some("nexo")
}

fn parse(name: &str, text: &str) -> Document {
    let mut doc = Document::default();
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    while let Some((number, line)) = lines.next() {
        let indent = line.len() - line.trim_start().len();
        let Some(info) = line.trim_start().strip_prefix("```") else { continue };
        let info = info.trim();
        let mut body = Vec::new();
        for (n, l) in lines.by_ref() {
            if l.trim_start().starts_with("```") {
                break;
            }
            body.push((n, l.get(indent..).unwrap_or(l.trim_start())));
        }
        let language = info.split_whitespace().next().unwrap_or("");
        if language != "console" {
            if !matches!(language, "rust" | "toml" | "json" | "python" | "javascript" | "js" | "wit" | "yaml" | "text")
            {
                for (n, l) in &body {
                    if runs_nexo(l) {
                        doc.errors.push(format!(
                            "{name}:{n}: `{}` is in a ```{language} block, so nothing tests it: make the block \
                             ```console (run by host/tests/docs.rs) or ```console ignore: REASON",
                            l.trim()
                        ));
                    }
                }
            }
            continue;
        }
        let rest = info["console".len()..].trim();
        if !rest.is_empty() {
            match rest.strip_prefix("ignore:").map(str::trim) {
                Some(reason) if !reason.is_empty() => doc.ignored.push((number, reason.to_string())),
                _ => doc.errors.push(format!(
                    "{name}:{number}: unknown console block attribute `{rest}`: write ```console ignore: REASON"
                )),
            }
            continue;
        }
        let mut block: Vec<Snippet> = Vec::new();
        let mut body = body.into_iter();
        while let Some((n, l)) = body.next() {
            if let Some(command) = l.strip_prefix("$ ") {
                let mut command = command.to_string();
                while command.ends_with('\\') {
                    let Some((_, next)) = body.next() else { break };
                    command.push('\n');
                    command.push_str(next);
                }
                block.push(Snippet { line: n, command, shown: Vec::new() });
            } else if let Some(last) = block.last_mut() {
                last.shown.push(l.to_string());
            } else {
                doc.errors.push(format!("{name}:{n}: a console block must start with a `$ ` command"));
            }
        }
        doc.snippets.push(block);
    }
    doc
}

/// The scratch directory a document runs in (see the module's doc).
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&repo().join("examples"), &dir.path().join("examples"));
    // nexo-tests builds the plugins into <dir>/wasm32-wasip2/release/.
    let release = Path::new(nexo_tests::HELLO).parent().unwrap();
    let plugins = release.parent().unwrap().parent().unwrap();
    std::fs::create_dir_all(dir.path().join("target")).unwrap();
    std::os::unix::fs::symlink(plugins, dir.path().join("target/plugins")).unwrap();
    for (_, path) in nexo_tests::ALL {
        let path = Path::new(path);
        std::fs::copy(path, dir.path().join(path.file_name().unwrap())).unwrap();
    }
    std::fs::copy(nexo_tests::HELLO, dir.path().join("agent.wasm")).unwrap();
    std::fs::copy(repo().join("examples/offline/reviewer.toml"), dir.path().join("agent.toml")).unwrap();
    std::fs::create_dir_all(dir.path().join("home")).unwrap();
    dir
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

const MARK: &str = "@@nexo-docs-status@@";

/// Runs a document's snippets in one bash; returns each command's output
/// and exit code, in order.
fn run(snippets: &[Snippet], dir: &Path) -> Vec<(String, i32)> {
    let mut script = String::from("cd \"$NEXO_DOCS_DIR\"\n");
    for s in snippets {
        let _ = write!(
            script,
            "{{ {}\n}} </dev/null 2>&1\n__s=$?; printf '\\n{MARK} %d\\n' \"$__s\"; (exit $__s)\n",
            s.command
        );
    }
    let nexo = Path::new(env!("CARGO_BIN_EXE_nexo"));
    let path = format!("{}:{}", nexo.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
    let mut cmd = std::process::Command::new("timeout");
    cmd.args(["--kill-after=10", "600", "bash", "-c", &script])
        .env_clear()
        .env("PATH", path)
        .env("HOME", dir.join("home"))
        .env("LANG", "C.UTF-8")
        .env("NEXO_DOCS_DIR", dir)
        // One compile cache for every document, so a plugin compiles once.
        .env("NEXO_CACHE_DIR", repo().join("target/docs-cache"));
    for keep in ["CARGO_HOME", "RUSTUP_HOME", "NEXO_WASM_TOOLCHAIN", "TMPDIR"] {
        if let Ok(v) = std::env::var(keep) {
            cmd.env(keep, v);
        }
    }
    let output = cmd.output().expect("run bash");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let mut results = Vec::new();
    let mut current = String::new();
    for line in text.split_inclusive('\n') {
        if let Some(code) = line.strip_prefix(MARK).map(str::trim) {
            let out = current.strip_suffix('\n').unwrap_or(&current).to_string();
            results.push((out, code.parse().unwrap_or(-1)));
            current.clear();
        } else {
            current.push_str(line);
        }
    }
    if results.len() < snippets.len() {
        results.push((current, output.status.code().unwrap_or(-1)));
    }
    results
}

/// The shown output as a snapbox pattern: `…` within a line, `...` or `…` as
/// a line of its own.
fn pattern(shown: &[String]) -> String {
    let mut out = String::new();
    for line in shown {
        if line.trim() == "..." || line.trim() == "…" {
            out.push_str("...\n");
        } else {
            out.push_str(&line.replace('…', "[..]"));
            out.push('\n');
        }
    }
    out
}

fn normalize(actual: &str, dir: &Path) -> String {
    let dir = dir.display().to_string();
    let mut out = actual.replace(&format!("{dir}/"), "").replace(&dir, ".");
    while out.ends_with('\n') {
        out.pop();
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_console_snippet_prints_what_it_shows() {
    let mut failures = Vec::new();
    let mut parsed = Vec::new();
    for path in documents() {
        let name = path.strip_prefix(repo()).unwrap().display().to_string();
        let doc = parse(&name, &std::fs::read_to_string(&path).unwrap());
        failures.extend(doc.errors.iter().cloned());
        parsed.push((name, doc));
    }

    let mut servers = Vec::new();
    for addr in ["127.0.0.1:11434", "127.0.0.1:8080"] {
        let server = MockServer::start_on(addr.parse().unwrap())
            .await
            .unwrap_or_else(|e| panic!("the docs name a model server on {addr}, but that port is taken ({e}): stop what listens there (a local Ollama?) while this test runs"));
        for _ in 0..200 {
            server.push(Reply::text("An answer from the loopback model."));
        }
        servers.push(server);
    }

    // NEXO_DOCS=getting-started,models runs only the documents whose names contain one of those.
    let only: Vec<String> =
        std::env::var("NEXO_DOCS").map(|v| v.split(',').map(str::to_string).collect()).unwrap_or_default();
    let mut ran = 0;
    for (name, doc) in &parsed {
        if !only.is_empty() && !only.iter().any(|o| name.contains(o.as_str())) {
            continue;
        }
        for (line, reason) in &doc.ignored {
            nexo_testkit::skipped(&format!("docs {name}:{line}"), &format!("not run: {reason}"));
        }
        let snippets: Vec<Snippet> = doc.snippets.iter().flatten().cloned().collect();
        if snippets.is_empty() {
            continue;
        }
        let dir = scratch();
        let path = dir.path().to_path_buf();
        let results = tokio::task::spawn_blocking(move || run(&snippets, &path)).await.unwrap();
        let mut index = 0;
        for block in &doc.snippets {
            for (i, s) in block.iter().enumerate() {
                let result = results.get(index);
                index += 1;
                let Some((actual, code)) = result else {
                    failures.push(format!("{name}:{}: `{}` never ran (an earlier command hung?)", s.line, s.command));
                    continue;
                };
                ran += 1;
                let next_shows_status = block.get(i + 1).is_some_and(|n| n.command.trim() == "echo $?");
                if *code != 0 && !next_shows_status {
                    failures.push(format!(
                        "{name}:{}: `{}` exited {code}; a snippet may fail only if the next command is `echo $?`\n{actual}",
                        s.line, s.command
                    ));
                    continue;
                }
                let actual = normalize(actual, dir.path());
                if std::env::var_os("NEXO_DOCS_SHOW").is_some() {
                    println!("{name}:{}\n$ {}\n{actual}", s.line, s.command);
                }
                let expected = pattern(&s.shown);
                let assert = snapbox::Assert::new().action(snapbox::assert::Action::Verify);
                if let Err(e) = assert.try_eq(
                    Some(&format!("{name}:{}", s.line)),
                    snapbox::Data::text(actual),
                    snapbox::Data::text(expected),
                ) {
                    failures.push(format!("{name}:{}: `{}` printed something else:\n{e}", s.line, s.command));
                }
            }
        }
    }
    drop(servers);
    assert!(ran > 0, "no console snippet ran");
    assert!(failures.is_empty(), "{} doc snippet problem(s):\n\n{}", failures.len(), failures.join("\n\n"));
}

/// Whether `actual` matches the shown lines, as the main test decides it.
fn matches(actual: &str, shown: &[&str]) -> bool {
    let shown: Vec<String> = shown.iter().map(|s| s.to_string()).collect();
    snapbox::Assert::new()
        .action(snapbox::assert::Action::Verify)
        .try_eq(
            None,
            snapbox::Data::text(normalize(actual, Path::new("/nowhere"))),
            snapbox::Data::text(pattern(&shown)),
        )
        .is_ok()
}

#[test]
fn the_runner_refuses_what_it_cannot_check() {
    let doc = parse(
        "x.md",
        "```sh\nNEXO_LOG=debug nexo run a.wasm hi\ncargo build\n```\n\
         ```console ignore:\n$ nexo x\n```\n\
         ```console ignore: needs a key\n$ nexo y\n```\n\
         ```console\nstray output\n$ nexo z \\\n  --json\nshown\n```\n",
    );
    assert_eq!(doc.errors.len(), 3, "{:?}", doc.errors);
    assert!(doc.errors[0].starts_with("x.md:2:"), "{}", doc.errors[0]);
    assert!(doc.errors[1].contains("ignore: REASON"), "{}", doc.errors[1]);
    assert!(doc.errors[2].contains("must start with a `$ ` command"), "{}", doc.errors[2]);
    assert_eq!(doc.ignored, vec![(8, "needs a key".to_string())]);
    let block = &doc.snippets[0];
    assert_eq!(block.len(), 1);
    assert_eq!(block[0].command, "nexo z \\\n  --json");
    assert_eq!(block[0].shown, vec!["shown".to_string()]);
}

#[test]
fn shown_output_matches_only_through_its_ellipses() {
    assert!(matches("run r01abc is paused\n", &["run r… is paused"]));
    assert!(matches("a\nb\nc\nd\n", &["a", "...", "d"]));
    assert!(!matches("run r01abc is done\n", &["run r… is paused"]));
    assert!(!matches("a\nb\n", &["a"]));
    assert!(!matches("", &["something"]));
    assert!(!matches("unexpected\n", &[]));
}

#[test]
fn each_command_reports_its_own_output_and_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let snippet = |command: &str| Snippet { line: 1, command: command.into(), shown: Vec::new() };
    let results =
        run(&[snippet("echo one; false"), snippet("echo $?"), snippet("X=2"), snippet("echo $X >&2")], dir.path());
    assert_eq!(
        results,
        vec![("one\n".into(), 1), ("1\n".into(), 0), (String::new(), 0), ("2\n".into(), 0)],
        "the shell keeps its state from one command to the next, and stderr is shown"
    );
}
