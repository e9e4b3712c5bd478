//! Parsing and validating `SKILL.md`: frontmatter split, YAML, field rules.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::{SkillError, SkillMetadata};

/// Longest allowed skill name, in characters.
pub const MAX_NAME_LEN: usize = 64;
/// Longest allowed description, in characters (after trimming).
pub const MAX_DESCRIPTION_LEN: usize = 1024;

/// A YAML node, kept untyped so that every type mismatch can be reported
/// with our own message naming the field, rather than a serde message that
/// may not.
#[derive(Debug)]
enum Raw {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Seq(Vec<Raw>),
    Map(Vec<(Raw, Raw)>),
}

impl Raw {
    fn kind(&self) -> &'static str {
        match self {
            Raw::Null => "null",
            Raw::Bool(_) => "a boolean",
            Raw::Int(_) | Raw::Float(_) => "a number",
            Raw::Str(_) => "a string",
            Raw::Seq(_) => "a list",
            Raw::Map(_) => "a mapping",
        }
    }

    /// The scalar as text; `None` for null, lists and mappings.
    fn scalar_text(&self) -> Option<String> {
        match self {
            Raw::Bool(b) => Some(b.to_string()),
            Raw::Int(i) => Some(i.to_string()),
            Raw::Float(f) => Some(f.to_string()),
            Raw::Str(s) => Some(s.clone()),
            Raw::Null | Raw::Seq(_) | Raw::Map(_) => None,
        }
    }
}

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RawVisitor)
    }
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E>(self) -> Result<Raw, E> {
        Ok(Raw::Null)
    }
    fn visit_none<E>(self) -> Result<Raw, E> {
        Ok(Raw::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Raw, D::Error> {
        Raw::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Raw, E> {
        Ok(Raw::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Raw, E> {
        Ok(Raw::Int(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Raw, E> {
        Ok(Raw::Int(v.into()))
    }
    fn visit_i128<E>(self, v: i128) -> Result<Raw, E> {
        Ok(Raw::Int(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Raw, E> {
        Ok(Raw::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Raw, E> {
        Ok(Raw::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Raw, E> {
        Ok(Raw::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Raw::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(Raw::Map(entries))
    }
}

/// Splits `SKILL.md` text into its frontmatter (without the `---` lines) and body.
fn split_frontmatter<'a>(file: &Path, text: &'a str) -> Result<(&'a str, &'a str), SkillError> {
    let err = |rule: &str| SkillError::Frontmatter { file: file.to_path_buf(), rule: rule.to_owned() };
    // Editors on Windows may add a byte-order mark; it is not content.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (first, mut rest) = text.split_once('\n').unwrap_or((text, ""));
    if first.trim_end() != "---" {
        return Err(err("missing: the file must start with a `---` line, then YAML, then another `---` line"));
    }
    let yaml_start = rest;
    let mut yaml_len = 0;
    loop {
        if rest.is_empty() {
            return Err(err("unterminated: no closing `---` line after the opening one"));
        }
        let (line, after) = rest.split_once('\n').unwrap_or((rest, ""));
        if line.trim_end() == "---" {
            return Ok((&yaml_start[..yaml_len], after));
        }
        yaml_len += rest.len() - after.len();
        rest = after;
    }
}

/// Checks a skill name against the Agent Skills rules; `Err` holds the rule broken.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    let len = name.chars().count();
    if len == 0 {
        return Err("must not be empty".to_owned());
    }
    if len > MAX_NAME_LEN {
        return Err(format!("is {len} characters long; at most {MAX_NAME_LEN} are allowed"));
    }
    if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        return Err(format!("{name:?} may contain only lowercase letters, digits and hyphens"));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err(format!("{name:?} must not start or end with a hyphen"));
    }
    if name.contains("--") {
        return Err(format!("{name:?} must not contain consecutive hyphens"));
    }
    Ok(())
}

/// Parses and validates the text of a `SKILL.md` file.
///
/// `file` is used only in error messages. Returns the metadata and the body
/// (trimmed). This does not check that the name matches a directory; see
/// [`load_skill`](crate::load_skill) for that.
///
/// Unknown top-level keys are accepted and ignored: public collections add
/// their own (`version`, `author`, ...) and rejecting them would make many
/// published skills unloadable.
pub fn parse_skill_md(file: &Path, text: &str) -> Result<(SkillMetadata, String), SkillError> {
    parse(file, text, false).map(|(metadata, body, _)| (metadata, body))
}

/// Parses like [`parse_skill_md`], except that a description over
/// [`MAX_DESCRIPTION_LEN`] is accepted; the third value is then a warning
/// that says so. For loading a skill into an agent, where one over-long
/// field should not stop the run; `nexo skill check` stays strict.
pub fn parse_skill_md_for_use(file: &Path, text: &str) -> Result<(SkillMetadata, String, Option<String>), SkillError> {
    parse(file, text, true)
}

pub(crate) fn parse(
    file: &Path,
    text: &str,
    allow_long: bool,
) -> Result<(SkillMetadata, String, Option<String>), SkillError> {
    let (yaml, body) = split_frontmatter(file, text)?;
    // A leading newline stands for the opening `---` line, so that the parser's
    // line numbers are the file's; snippets are off to keep messages on one line.
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    let root: Raw = serde_saphyr::from_str_with_options(&format!("\n{yaml}"), options)
        .map_err(|e| SkillError::Yaml { file: file.to_path_buf(), message: e.to_string() })?;
    let entries = match root {
        // An empty frontmatter is an empty mapping: the missing name is reported.
        Raw::Null => Vec::new(),
        Raw::Map(entries) => entries,
        other => {
            return Err(SkillError::Frontmatter {
                file: file.to_path_buf(),
                rule: format!("must be a YAML mapping of fields, found {}", other.kind()),
            });
        }
    };

    let mut fields: BTreeMap<String, Raw> = BTreeMap::new();
    for (key, value) in entries {
        let Raw::Str(key) = key else {
            // Only string keys can be known fields; others are unknown keys, ignored.
            continue;
        };
        if fields.contains_key(&key) {
            return Err(SkillError::field(file, &key, "appears more than once"));
        }
        fields.insert(key, value);
    }

    let name = required_string(file, &mut fields, "name")?;
    check_name(&name).map_err(|rule| SkillError::field(file, "name", rule))?;

    let description = required_string(file, &mut fields, "description")?.trim().to_owned();
    let len = description.chars().count();
    if len == 0 {
        return Err(SkillError::field(file, "description", "must not be empty"));
    }
    let mut warning = None;
    if len > MAX_DESCRIPTION_LEN {
        let rule = format!("is {len} characters long; at most {MAX_DESCRIPTION_LEN} are allowed");
        if !allow_long {
            return Err(SkillError::field(file, "description", rule));
        }
        warning = Some(format!("{}: `description` {rule}; it is cut where listed", file.display()));
    }

    let license = optional_string(file, &mut fields, "license")?;
    let compatibility = optional_string(file, &mut fields, "compatibility")?;
    let extra = metadata_map(file, fields.remove("metadata"))?;
    let allowed_tools = allowed_tools(file, fields.remove("allowed-tools"))?;

    let metadata = SkillMetadata { name, description, license, compatibility, allowed_tools, extra };
    Ok((metadata, body.trim().to_owned(), warning))
}

fn required_string(file: &Path, fields: &mut BTreeMap<String, Raw>, field: &str) -> Result<String, SkillError> {
    match fields.remove(field) {
        None | Some(Raw::Null) => Err(SkillError::field(file, field, "is required")),
        Some(Raw::Str(s)) => Ok(s),
        Some(other) => Err(SkillError::field(file, field, format!("must be a string, found {}", other.kind()))),
    }
}

fn optional_string(file: &Path, fields: &mut BTreeMap<String, Raw>, field: &str) -> Result<Option<String>, SkillError> {
    match fields.remove(field) {
        None | Some(Raw::Null) => Ok(None),
        Some(Raw::Str(s)) => Ok(Some(s)),
        Some(other) => Err(SkillError::field(file, field, format!("must be a string, found {}", other.kind()))),
    }
}

/// `metadata`: a mapping of string to string. Numbers and booleans are
/// converted to text because public skills write `version: 1.0` unquoted.
fn metadata_map(file: &Path, value: Option<Raw>) -> Result<BTreeMap<String, String>, SkillError> {
    let entries = match value {
        None | Some(Raw::Null) => return Ok(BTreeMap::new()),
        Some(Raw::Map(entries)) => entries,
        Some(other) => {
            return Err(SkillError::field(
                file,
                "metadata",
                format!("must be a mapping of strings to strings, found {}", other.kind()),
            ));
        }
    };
    let mut map = BTreeMap::new();
    for (key, value) in entries {
        let Some(key) = key.scalar_text() else {
            return Err(SkillError::field(file, "metadata", format!("keys must be strings, found {}", key.kind())));
        };
        let field = format!("metadata.{key}");
        let text = match value {
            Raw::Null => String::new(),
            other => other.scalar_text().ok_or_else(|| {
                SkillError::field(file, &field, format!("must be a string, number or boolean, found {}", other.kind()))
            })?,
        };
        if map.insert(key, text).is_some() {
            return Err(SkillError::field(file, field, "appears more than once"));
        }
    }
    Ok(map)
}

/// `allowed-tools`: a space- or comma-separated string, or a list of strings.
fn allowed_tools(file: &Path, value: Option<Raw>) -> Result<Vec<String>, SkillError> {
    match value {
        None | Some(Raw::Null) => Ok(Vec::new()),
        Some(Raw::Str(s)) => {
            Ok(s.split(|c: char| c == ',' || c.is_whitespace()).filter(|t| !t.is_empty()).map(str::to_owned).collect())
        }
        Some(Raw::Seq(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Raw::Str(s) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
                Raw::Str(_) => Err(SkillError::field(file, format!("allowed-tools[{i}]"), "must not be empty")),
                other => Err(SkillError::field(
                    file,
                    format!("allowed-tools[{i}]"),
                    format!("must be a string, found {}", other.kind()),
                )),
            })
            .collect(),
        Some(other) => Err(SkillError::field(
            file,
            "allowed-tools",
            format!("must be a space- or comma-separated string or a list of strings, found {}", other.kind()),
        )),
    }
}
