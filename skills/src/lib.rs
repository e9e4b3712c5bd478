//! Agent Skills packages: parse, validate, discover and scaffold them.
//!
//! A skill is a directory holding `SKILL.md` — YAML frontmatter between two
//! `---` lines, then Markdown instructions — and optionally `references/`,
//! `scripts/` and `assets/` directories. The directory name must equal the
//! skill's `name`.
//!
//! - [`load_skill`] loads one package; [`parse_skill_md`] parses the text alone.
//! - [`SkillSet::load`] scans a skills directory (by default [`DEFAULT_SKILLS_DIR`]),
//!   one sub-directory per skill; [`find`] loads one skill by name.
//! - [`scaffold`] creates a new, valid package.
//!
//! Skills are data: nothing in this crate executes a script or follows a
//! symlink out of a skill's directory.

mod error;
mod parse;

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

pub use error::SkillError;
pub use parse::{MAX_DESCRIPTION_LEN, MAX_NAME_LEN, parse_skill_md, parse_skill_md_for_use};

/// The skills directory used when none is configured.
pub const DEFAULT_SKILLS_DIR: &str = "skills";
/// The file that makes a directory a skill package.
pub const SKILL_FILE: &str = "SKILL.md";
/// The sub-directories whose files are listed as a skill's resources.
pub const RESOURCE_DIRS: [&str; 3] = ["references", "scripts", "assets"];
/// The description [`scaffold`] writes, to be replaced by the author.
pub const PLACEHOLDER_DESCRIPTION: &str = "Describe what this skill does and when to use it.";

/// The frontmatter of a `SKILL.md`, validated. The host uses the same type for
/// skill components' metadata; it serializes with the frontmatter's
/// kebab-case names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct SkillMetadata {
    /// 1–64 lowercase letters, digits and single hyphens; equals the directory name.
    pub name: String,
    /// What the skill does and when to use it; 1–1024 characters, trimmed.
    pub description: String,
    /// The `license` field, if present.
    pub license: Option<String>,
    /// The `compatibility` field (environment requirements), if present.
    pub compatibility: Option<String>,
    /// The `allowed-tools` field, split into tool names; empty if absent.
    pub allowed_tools: Vec<String>,
    /// The `metadata` map; non-string scalar values are converted to text.
    pub extra: BTreeMap<String, String>,
}

/// One loaded skill package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// The validated frontmatter.
    pub metadata: SkillMetadata,
    /// The Markdown body of `SKILL.md`, trimmed.
    pub instructions: String,
    /// The skill's directory.
    pub dir: PathBuf,
    /// Every file under `references/`, `scripts/` and `assets/`, as sorted,
    /// `/`-separated paths relative to [`dir`](Skill::dir).
    pub resources: Vec<String>,
    /// What loading tolerated (only [`find`] tolerates anything: an over-long
    /// description). Empty for a package that passes [`load_skill`].
    pub warnings: Vec<String>,
}

impl Skill {
    /// The skill's name.
    pub fn name(&self) -> &str {
        &self.metadata.name
    }
}

/// Loads and validates the skill package in `dir`.
///
/// Fails if `dir/SKILL.md` is missing or invalid, or if its `name` is not
/// the directory's name.
pub fn load_skill(dir: &Path) -> Result<Skill, SkillError> {
    load(dir, false)
}

fn load(dir: &Path, for_use: bool) -> Result<Skill, SkillError> {
    let file = dir.join(SKILL_FILE);
    let dir_name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let text = match fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(SkillError::NotFound { name: dir_name, path: file });
        }
        Err(e) => return Err(SkillError::io(file, e)),
    };
    let (metadata, instructions, warning) =
        if for_use { parse::parse_skill_md_for_use(&file, &text)? } else { parse::parse(&file, &text, false)? };
    if metadata.name != dir_name {
        return Err(SkillError::field(
            &file,
            "name",
            format!("{:?} must match the directory name {dir_name:?}", metadata.name),
        ));
    }
    let resources = list_resources(dir)?;
    Ok(Skill { metadata, instructions, dir: dir.to_path_buf(), resources, warnings: warning.into_iter().collect() })
}

/// Lists the files under the resource directories of the skill in `dir`,
/// leaving out hidden ones (a name starting with `.`).
fn list_resources(dir: &Path) -> Result<Vec<String>, SkillError> {
    // Symlinks are resolved against the canonical skill dir, so that one
    // pointing outside (e.g. `references/x -> /etc/passwd`) is never listed.
    let root = dir.canonicalize().map_err(|e| SkillError::io(dir, e))?;
    let mut out = Vec::new();
    for sub in RESOURCE_DIRS {
        let path = dir.join(sub);
        match fs::symlink_metadata(&path) {
            // A symlinked resource directory is not descended: it could lead anywhere.
            Ok(meta) if meta.is_dir() => walk(&root, &path, sub, &mut out)?,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(SkillError::io(path, e)),
        }
    }
    out.sort();
    Ok(out)
}

fn walk(root: &Path, dir: &Path, rel: &str, out: &mut Vec<String>) -> Result<(), SkillError> {
    let entries = fs::read_dir(dir).map_err(|e| SkillError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| SkillError::io(dir, e))?;
        // Hidden files and directories (`.keep`, `.DS_Store`, `.git/`) are not resources.
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        let rel = format!("{rel}/{}", entry.file_name().to_string_lossy());
        let kind = entry.file_type().map_err(|e| SkillError::io(&path, e))?;
        if kind.is_dir() {
            walk(root, &path, &rel, out)?;
        } else if kind.is_file() {
            out.push(rel);
        } else if kind.is_symlink() {
            // A symlink is listed only if it is a file inside the skill; symlinked
            // directories are not descended (no escapes, no cycles). A broken
            // link is skipped.
            if let Ok(target) = path.canonicalize()
                && target.starts_with(root)
                && target.is_file()
            {
                out.push(rel);
            }
        }
    }
    Ok(())
}

/// The skills found in a skills directory, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillSet {
    skills: BTreeMap<String, Skill>,
}

impl SkillSet {
    /// Loads every skill in `path`, one sub-directory per skill.
    ///
    /// A missing `path` is an empty set. Hidden directories (`.git`, ...) and
    /// plain files are skipped; any other sub-directory must be a valid skill,
    /// and the first invalid one (in name order) is the error.
    pub fn load(path: &Path) -> Result<SkillSet, SkillError> {
        let entries = match fs::read_dir(path) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(SkillSet::default()),
            Err(e) => return Err(SkillError::io(path, e)),
        };
        let mut dirs = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| SkillError::io(path, e))?;
            let hidden = entry.file_name().to_string_lossy().starts_with('.');
            let is_dir = entry.file_type().map_err(|e| SkillError::io(entry.path(), e))?.is_dir();
            if is_dir && !hidden {
                dirs.push(entry.path());
            }
        }
        dirs.sort();
        let mut skills = BTreeMap::new();
        for dir in dirs {
            let skill = load_skill(&dir)?;
            skills.insert(skill.metadata.name.clone(), skill);
        }
        Ok(SkillSet { skills })
    }

    /// The skill called `name`, if loaded.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.get(name)
    }

    /// The skills, in name order.
    pub fn iter(&self) -> impl Iterator<Item = &Skill> {
        self.skills.values()
    }

    /// The skill names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.skills.keys().map(String::as_str)
    }

    /// How many skills were loaded.
    pub fn len(&self) -> usize {
        self.skills.len()
    }

    /// Whether no skill was loaded.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }
}

/// Loads the skill called `name` from the skills directory `skills_path`,
/// as an agent uses it.
///
/// The name is validated first, so that it cannot address anything outside
/// `skills_path` (`../x` is not a skill name). Every rule of [`load_skill`]
/// holds but one: a description over [`MAX_DESCRIPTION_LEN`] is accepted,
/// with a note in [`Skill::warnings`], since public skills exist that break
/// only that rule.
pub fn find(skills_path: &Path, name: &str) -> Result<Skill, SkillError> {
    let dir = skills_path.join(name);
    let file = dir.join(SKILL_FILE);
    parse::check_name(name).map_err(|rule| SkillError::field(&file, "name", rule))?;
    if !file.is_file() {
        return Err(SkillError::NotFound { name: name.to_owned(), path: file });
    }
    load(&dir, true)
}

/// Creates a new skill package `skills_path/name` and returns its directory.
///
/// Writes `SKILL.md` (valid frontmatter with [`PLACEHOLDER_DESCRIPTION`] and a
/// template body) and `references/.keep`. Refuses an invalid name and an
/// existing directory: nothing is ever overwritten.
pub fn scaffold(skills_path: &Path, name: &str) -> Result<PathBuf, SkillError> {
    let dir = skills_path.join(name);
    let file = dir.join(SKILL_FILE);
    parse::check_name(name).map_err(|rule| SkillError::field(&file, "name", rule))?;
    if fs::symlink_metadata(&dir).is_ok() {
        return Err(SkillError::AlreadyExists { path: dir });
    }
    fs::create_dir_all(skills_path).map_err(|e| SkillError::io(skills_path, e))?;
    // `create_dir` (not `_all`) fails if the directory appeared meanwhile.
    fs::create_dir(&dir).map_err(|e| match e.kind() {
        io::ErrorKind::AlreadyExists => SkillError::AlreadyExists { path: dir.clone() },
        _ => SkillError::io(&dir, e),
    })?;
    write_new(&file, &template(name))?;
    let references = dir.join("references");
    fs::create_dir(&references).map_err(|e| SkillError::io(&references, e))?;
    write_new(&references.join(".keep"), "")?;
    Ok(dir)
}

fn write_new(path: &Path, contents: &str) -> Result<(), SkillError> {
    let mut f = fs::OpenOptions::new().write(true).create_new(true).open(path).map_err(|e| SkillError::io(path, e))?;
    f.write_all(contents.as_bytes()).map_err(|e| SkillError::io(path, e))
}

fn template(name: &str) -> String {
    let title: Vec<String> = name
        .split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect();
    let title = title.join(" ");
    format!(
        "---\nname: {name}\ndescription: {PLACEHOLDER_DESCRIPTION}\n---\n\n# {title}\n\n\
         ## When to use this skill\n\nDescribe the tasks and requests this skill is for.\n\n\
         ## Instructions\n\n1. First step.\n2. Second step.\n\n\
         ## References\n\nPut longer material in `references/` and say here when to read it.\n"
    )
}
