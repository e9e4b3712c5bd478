//! How an error names what fixes it. The library's errors say what to
//! change in the words every front end shares: the keys of the config
//! file's `[grant]` and of a tenant's policy (`allow`, `mode`, `sandbox`),
//! and the run's limits. A front end with flags of its own (the CLI) sets
//! [`Vocabulary::Flags`] on the runs it drives, so that its operator reads
//! the flag; a tenant of `nexo serve` never reads a flag it cannot pass.

/// The words an error uses for a fix.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Vocabulary {
    /// The settings' names, as the config file and a tenant's policy spell
    /// them.
    #[default]
    Settings,
    /// The command line's flags.
    Flags,
}

/// A change that fixes an error.
#[derive(Debug, Clone, Copy)]
pub enum Fix<'a> {
    /// Grant this capability.
    Allow(&'a str),
    /// Choose one of these permission modes.
    Modes(&'a [&'a str]),
    /// Choose this sandbox.
    Sandbox(&'a str),
    /// Go on though the component changed: by checkpoints only.
    ChangedComponent,
    /// Give the run more time.
    TimeLimit,
}

impl Vocabulary {
    /// How this vocabulary says `fix`, to follow "grant it with", "choose"
    /// and the like.
    pub fn fix(self, fix: Fix<'_>) -> String {
        let or = |items: Vec<String>| items.join(" or ");
        match (self, fix) {
            (Vocabulary::Flags, Fix::Allow(cap)) => {
                format!("`--allow {cap}` (or `allow = [\"{cap}\"]` in the config file's `[grant]`)")
            }
            (Vocabulary::Settings, Fix::Allow(cap)) => {
                format!("`{cap}` in the grant's `allow` list (for a tenant, its policy's `allow`)")
            }
            (Vocabulary::Flags, Fix::Modes(modes)) => or(modes.iter().map(|m| format!("`--mode {m}`")).collect()),
            (Vocabulary::Settings, Fix::Modes(modes)) => {
                format!("the mode {}", or(modes.iter().map(|m| format!("`{m}`")).collect()))
            }
            (Vocabulary::Flags, Fix::Sandbox("container")) => "`--sandbox container --image IMAGE`".to_string(),
            (Vocabulary::Flags, Fix::Sandbox(kind)) => format!("`--sandbox {kind}`"),
            (Vocabulary::Settings, Fix::Sandbox(kind)) => format!("the `{kind}` sandbox"),
            (Vocabulary::Flags, Fix::ChangedComponent) => "`--allow-changed-component`".to_string(),
            (Vocabulary::Settings, Fix::ChangedComponent) => "allowing a changed component".to_string(),
            (Vocabulary::Flags, Fix::TimeLimit) => "`--timeout SECS`".to_string(),
            (Vocabulary::Settings, Fix::TimeLimit) => "on a server, `[serve] run-timeout-secs`".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_never_name_a_flag_and_flags_name_theirs() {
        let fixes = [
            Fix::Allow("fetch"),
            Fix::Modes(&["approve", "auto"]),
            Fix::Sandbox("local"),
            Fix::Sandbox("container"),
            Fix::ChangedComponent,
            Fix::TimeLimit,
        ];
        for fix in fixes {
            let said = Vocabulary::Settings.fix(fix);
            assert!(!said.contains("--"), "{said}");
            assert!(Vocabulary::Flags.fix(fix).contains("`--"), "{fix:?}");
        }
        assert_eq!(Vocabulary::Flags.fix(Fix::Modes(&["approve", "auto"])), "`--mode approve` or `--mode auto`");
        assert_eq!(Vocabulary::Settings.fix(Fix::Sandbox("local")), "the `local` sandbox");
    }
}
