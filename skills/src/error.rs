//! The one error type of this crate.

use std::path::PathBuf;

/// Why a skill package could not be loaded, found or created.
///
/// Every message names the file it concerns, the field (or part of the file)
/// and the rule that was broken, so that a user can fix a package without
/// reading this crate's source.
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    /// No `SKILL.md` where a skill was expected.
    #[error("no skill \"{name}\": {} does not exist", path.display())]
    NotFound {
        /// The skill name that was asked for.
        name: String,
        /// The `SKILL.md` path that was looked for.
        path: PathBuf,
    },
    /// `SKILL.md` has no frontmatter, or its frontmatter is not closed.
    #[error("{}: frontmatter: {rule}", file.display())]
    Frontmatter {
        /// The `SKILL.md` file.
        file: PathBuf,
        /// The rule that was broken.
        rule: String,
    },
    /// The frontmatter is not valid YAML.
    #[error("{}: frontmatter: must be valid YAML: {message}", file.display())]
    Yaml {
        /// The `SKILL.md` file.
        file: PathBuf,
        /// The YAML parser's message.
        message: String,
    },
    /// A frontmatter field is missing, has the wrong type or an invalid value.
    #[error("{}: {field}: {rule}", file.display())]
    Field {
        /// The `SKILL.md` file.
        file: PathBuf,
        /// The field, e.g. `name`, `metadata.version` or `allowed-tools[1]`.
        field: String,
        /// The rule that was broken.
        rule: String,
    },
    /// [`scaffold`](crate::scaffold) found something already at the skill's path.
    #[error("{}: already exists; refusing to overwrite it", path.display())]
    AlreadyExists {
        /// The existing skill directory.
        path: PathBuf,
    },
    /// A filesystem operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path that was being read or written.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl SkillError {
    pub(crate) fn field(file: impl Into<PathBuf>, field: impl Into<String>, rule: impl Into<String>) -> Self {
        SkillError::Field { file: file.into(), field: field.into(), rule: rule.into() }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        SkillError::Io { path: path.into(), source }
    }
}
