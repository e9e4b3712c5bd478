//! A shell command line read the way command rules need it: as plain
//! commands, each an argv, or not at all.
//!
//! The reader is deliberately small. It knows words, quotes, backslashes
//! and the operators that join commands (`;`, `&&`, `||`, `|`, newlines);
//! anything whose meaning the shell decides at run time (an expansion, a
//! substitution, a redirection, a glob, a subshell, a keyword, a variable
//! assignment, a background job) makes the line unreadable, and a rule
//! never vouches for what it cannot read.

use std::fmt;

/// Why a command line cannot be read as plain commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable(pub &'static str);

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// Words that a command may not start with: the shell's keywords, and its
/// builtins that run code, rename a program, or read a quoted argument as
/// code (bash evaluates `test -v 'x[$(…)]'`, `printf -v`, `read`, `unset`
/// and `declare` subscripts). A line that starts a command with one is not
/// plain; an operator who wants the program allows it by path
/// (`/usr/bin/printf`).
const SHELL_WORDS: &[&str] = &[
    // keywords
    "if",
    "then",
    "else",
    "elif",
    "fi",
    "case",
    "esac",
    "for",
    "select",
    "while",
    "until",
    "do",
    "done",
    "in",
    "function",
    "time",
    "coproc",
    "!",
    // builtins that run code or rename programs
    "eval",
    "exec",
    "command",
    "builtin",
    ".",
    "source",
    "alias",
    "unalias",
    "hash",
    "trap",
    "fc",
    "enable",
    // builtins that set variables or options, or evaluate subscripts
    "export",
    "readonly",
    "declare",
    "typeset",
    "local",
    "let",
    "set",
    "shopt",
    "unset",
    "read",
    "mapfile",
    "readarray",
    "printf",
    "test",
    "getopts",
    "wait",
    "compgen",
    "complete",
];

/// The plain commands of `line`, in order, each as its argv; an empty
/// line has none.
pub fn split(line: &str) -> Result<Vec<Vec<String>>, Unreadable> {
    let mut reader = Reader::default();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => reader.end_word(),
            ';' | '\n' => reader.end_command()?,
            '&' if chars.next_if_eq(&'&').is_some() => reader.end_command()?,
            '&' => return Err(Unreadable("`&` (a command in the background)")),
            '|' if chars.next_if_eq(&'&').is_some() => return Err(Unreadable("`|&` (a redirection)")),
            '|' => {
                chars.next_if_eq(&'|');
                reader.end_command()?;
            }
            '\'' => {
                reader.started();
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => reader.word.push(c),
                        None => return Err(Unreadable("an unclosed quote")),
                    }
                }
            }
            '"' => {
                reader.started();
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('$' | '`') => {
                            return Err(Unreadable("an expansion inside double quotes (`$` or `` ` ``)"));
                        }
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => reader.word.push(c),
                            Some('\n') | None => return Err(Unreadable("a line continuation")),
                            Some(c) => {
                                reader.word.push('\\');
                                reader.word.push(c);
                            }
                        },
                        Some(c) => reader.word.push(c),
                        None => return Err(Unreadable("an unclosed quote")),
                    }
                }
            }
            '\\' => match chars.next() {
                Some('\n') | None => return Err(Unreadable("a line continuation")),
                Some(c) => {
                    reader.started();
                    reader.word.push(c);
                }
            },
            c => {
                if let Some(why) = special(c) {
                    return Err(Unreadable(why));
                }
                reader.started();
                reader.word.push(c);
            }
        }
    }
    reader.finish()
}

/// `argv` as one command line that [`split`] reads back as it: each word
/// as it is when that is plain, else in single quotes.
pub fn join(argv: &[String]) -> String {
    let words: Vec<String> = argv
        .iter()
        .map(|w| {
            let plain = !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
            if plain { w.clone() } else { format!("'{}'", w.replace('\'', "'\\''")) }
        })
        .collect();
    words.join(" ")
}

/// What an unquoted character means to the shell, when it is more than
/// itself.
fn special(c: char) -> Option<&'static str> {
    Some(match c {
        '$' | '`' => "an expansion or substitution (`$` or `` ` ``)",
        '<' | '>' => "a redirection (`<` or `>`)",
        '(' | ')' => "a subshell or function (`(` or `)`)",
        '{' | '}' => "a brace group or expansion (`{` or `}`)",
        '*' | '?' | '[' | ']' => "a glob pattern (`*`, `?` or `[`)",
        '~' => "a home directory (`~`)",
        '#' => "a comment (`#`)",
        '!' => "`!` (a negation or history expansion)",
        '=' => return None,
        c if c.is_control() => "a control character",
        _ => return None,
    })
}

/// The commands read so far, the one being read and its word.
#[derive(Default)]
struct Reader {
    commands: Vec<Vec<String>>,
    argv: Vec<String>,
    word: String,
    /// Whether a word has begun: `''` is a word, empty.
    in_word: bool,
}

impl Reader {
    fn started(&mut self) {
        self.in_word = true;
    }

    fn end_word(&mut self) {
        if self.in_word {
            self.argv.push(std::mem::take(&mut self.word));
            self.in_word = false;
        }
    }

    fn end_command(&mut self) -> Result<(), Unreadable> {
        self.end_word();
        if self.argv.is_empty() {
            return Err(Unreadable("an operator with no command before it"));
        }
        let argv = std::mem::take(&mut self.argv);
        if argv[0].contains('=') {
            return Err(Unreadable("a variable assignment before a command (`NAME=value`)"));
        }
        if SHELL_WORDS.contains(&argv[0].as_str()) {
            return Err(Unreadable(
                "a shell keyword or builtin that runs code, renames a program or sets variables (`for`, `eval`, \
                 `alias`, `export`, `printf` and the like)",
            ));
        }
        self.commands.push(argv);
        Ok(())
    }

    /// The commands read. A line may end with an operator: `a;` runs `a`,
    /// and the shell refuses `a &&` itself.
    fn finish(mut self) -> Result<Vec<Vec<String>>, Unreadable> {
        self.end_word();
        if !self.argv.is_empty() {
            self.end_command()?;
        }
        Ok(self.commands)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<Vec<&str>> {
        let commands = split(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        commands.into_iter().map(|argv| argv.into_iter().map(|w| &*w.leak()).collect()).collect()
    }

    #[test]
    fn plain_commands_read_as_their_argv() {
        let table: [(&str, Vec<Vec<&str>>); 10] = [
            ("git status", vec![vec!["git", "status"]]),
            ("  git   status  ", vec![vec!["git", "status"]]),
            ("git commit -m 'a b; c'", vec![vec!["git", "commit", "-m", "a b; c"]]),
            ("echo \"a \\\" b\"", vec![vec!["echo", "a \" b"]]),
            ("cd src && cargo test || true", vec![vec!["cd", "src"], vec!["cargo", "test"], vec!["true"]]),
            ("ls | wc -l; pwd\nid", vec![vec!["ls"], vec!["wc", "-l"], vec!["pwd"], vec!["id"]]),
            ("echo a\\ b ''", vec![vec!["echo", "a b", ""]]),
            ("grep -r 'x*' .", vec![vec!["grep", "-r", "x*", "."]]),
            ("git log --format=%H", vec![vec!["git", "log", "--format=%H"]]),
            ("", vec![]),
        ];
        for (line, want) in table {
            assert_eq!(words(line), want, "{line:?}");
        }
    }

    #[test]
    fn a_joined_argv_reads_back_as_itself() {
        for argv in [vec!["git", "push"], vec!["my tool", "it's", "", "a=b", "$x", "*"]] {
            let argv: Vec<String> = argv.into_iter().map(String::from).collect();
            assert_eq!(split(&join(&argv)).unwrap(), vec![argv.clone()], "{}", join(&argv));
        }
    }

    #[test]
    fn what_the_shell_decides_at_run_time_is_not_read() {
        for line in [
            "echo $HOME",
            "echo ${HOME}",
            "echo $(rm -rf x)",
            "echo `id`",
            "echo \"$(id)\"",
            "echo \"`id`\"",
            "cat < /etc/passwd",
            "echo x > f",
            "echo x >> f",
            "(rm -rf x)",
            "{ rm x; }",
            "echo {a,b}",
            "rm *.rs",
            "rm file?",
            "rm [ab]",
            "cat ~/.ssh/id_rsa",
            "echo x # comment",
            "! false",
            "sleep 10 &",
            "a |& b",
            "PATH=. git status",
            "GIT_SSH_COMMAND=evil git fetch",
            "for f in a; do rm $f; done",
            "for f in a b; do rm f; done",
            "if true; then rm x; fi",
            "time rm x",
            "test -v 'x[$(id)]'",
            "printf -v PATH %s .; git status",
            "alias r=rm\nr -rf x",
            "hash -p /bin/rm r; r x",
            "command rm x",
            "eval rm x",
            ". ./script",
            "export PATH=.",
            "echo a | read 'x[$(id)]'",
            "echo 'unclosed",
            "echo \"unclosed",
            "echo a \\\nb",
            "echo \x07bell",
            "a && && b",
            "; a",
            "| a",
            "a ||| b",
        ] {
            assert!(split(line).is_err(), "{line:?} should not be read as plain commands: {:?}", split(line));
        }
    }
}
