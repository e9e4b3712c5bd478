//! Malformed packages: each error names the file, the field and the rule.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::PathBuf;

use nexo_skills::{SkillError, load_skill};
use tempfile::TempDir;

/// Writes `text` as `<tmp>/<dir>/SKILL.md` and loads that directory.
fn load(dir: &str, text: &str) -> (TempDir, PathBuf, SkillError) {
    let tmp = tempfile::tempdir().unwrap();
    let skill_dir = tmp.path().join(dir);
    fs::create_dir(&skill_dir).unwrap();
    let file = skill_dir.join("SKILL.md");
    fs::write(&file, text).unwrap();
    let err = load_skill(&skill_dir).expect_err("the package is invalid");
    (tmp, file, err)
}

/// Asserts the error is about `field` of the package's file and its message
/// is `<file>: <field>: <rule>` with `rule` containing `rule_part`.
fn assert_field(dir: &str, text: &str, field: &str, rule_part: &str) {
    let (_tmp, file, err) = load(dir, text);
    let SkillError::Field { file: f, field: got, rule } = &err else { panic!("not a field error: {err:?}") };
    assert_eq!(f, &file);
    assert_eq!(got, field, "{err}");
    assert!(rule.contains(rule_part), "{err}");
    let msg = err.to_string();
    assert!(msg.starts_with(&format!("{}: {field}: ", file.display())), "{msg}");
    assert!(msg.contains(rule_part), "{msg}");
}

fn skill_md(name: &str, description: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\nBody.\n")
}

#[test]
fn missing_name() {
    assert_field("triage", "---\ndescription: Triage issues.\n---\n", "name", "is required");
}

#[test]
fn name_must_match_directory() {
    assert_field(
        "triage",
        &skill_md("tri", "Triage issues."),
        "name",
        r#""tri" must match the directory name "triage""#,
    );
}

#[test]
fn uppercase_name() {
    let (_tmp, file, err) = load("Triage", &skill_md("Triage", "Triage issues."));
    assert_eq!(
        err.to_string(),
        format!(r#"{}: name: "Triage" may contain only lowercase letters, digits and hyphens"#, file.display())
    );
}

#[test]
fn leading_hyphen_name() {
    assert_field("-triage", &skill_md("-triage", "x"), "name", "must not start or end with a hyphen");
}

#[test]
fn trailing_hyphen_name() {
    assert_field("triage-", &skill_md("triage-", "x"), "name", "must not start or end with a hyphen");
}

#[test]
fn double_hyphen_name() {
    assert_field("tri--age", &skill_md("tri--age", "x"), "name", "must not contain consecutive hyphens");
}

#[test]
fn name_of_65_characters() {
    let name = "a".repeat(65);
    assert_field(&name, &skill_md(&name, "x"), "name", "is 65 characters long; at most 64 are allowed");
}

#[test]
fn name_of_64_characters_is_fine() {
    let tmp = tempfile::tempdir().unwrap();
    let name = "a".repeat(64);
    let dir = tmp.path().join(&name);
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("SKILL.md"), skill_md(&name, "x")).unwrap();
    assert_eq!(load_skill(&dir).unwrap().metadata.name, name);
}

#[test]
fn name_must_be_a_string() {
    assert_field("triage", &skill_md("[a, b]", "x"), "name", "must be a string, found a list");
}

#[test]
fn empty_description() {
    assert_field("triage", &skill_md("triage", "\"   \""), "description", "must not be empty");
    assert_field("triage", "---\nname: triage\ndescription:\n---\n", "description", "is required");
}

#[test]
fn description_of_1025_characters() {
    let long = "d".repeat(1025);
    assert_field("triage", &skill_md("triage", &long), "description", "is 1025 characters long; at most 1024");
}

#[test]
fn description_length_counts_characters_after_trimming() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("triage");
    fs::create_dir(&dir).unwrap();
    // 1024 two-byte characters, padded with spaces that trimming removes.
    let desc = format!("\"  {}  \"", "é".repeat(1024));
    fs::write(dir.join("SKILL.md"), skill_md("triage", &desc)).unwrap();
    assert_eq!(load_skill(&dir).unwrap().metadata.description.chars().count(), 1024);
}

#[test]
fn no_frontmatter() {
    let (_tmp, file, err) = load("triage", "# Triage\n\nNo frontmatter here.\n");
    assert!(matches!(err, SkillError::Frontmatter { .. }));
    assert_eq!(
        err.to_string(),
        format!(
            "{}: frontmatter: missing: the file must start with a `---` line, then YAML, then another `---` line",
            file.display()
        )
    );
}

#[test]
fn unterminated_frontmatter() {
    let (_tmp, file, err) = load("triage", "---\nname: triage\ndescription: x\n\n# Body\n");
    assert!(matches!(err, SkillError::Frontmatter { .. }));
    assert_eq!(
        err.to_string(),
        format!("{}: frontmatter: unterminated: no closing `---` line after the opening one", file.display())
    );
}

#[test]
fn invalid_yaml() {
    let (_tmp, file, err) = load("triage", "---\nname: triage\ndescription: [unclosed\n---\n");
    assert!(matches!(err, SkillError::Yaml { .. }), "{err:?}");
    assert!(err.to_string().starts_with(&format!("{}: frontmatter: must be valid YAML: ", file.display())), "{err}");
    // Line numbers are the file's, not the frontmatter's.
    assert!(err.to_string().contains("line 3"), "{err}");
    assert!(!err.to_string().contains('\n'), "one line: {err}");
}

#[test]
fn frontmatter_must_be_a_mapping() {
    let (_tmp, _file, err) = load("triage", "---\n- a\n- b\n---\n");
    assert!(err.to_string().contains("frontmatter: must be a YAML mapping of fields, found a list"), "{err}");
}

#[test]
fn allowed_tools_as_a_number() {
    assert_field(
        "triage",
        "---\nname: triage\ndescription: x\nallowed-tools: 42\n---\n",
        "allowed-tools",
        "must be a space- or comma-separated string or a list of strings, found a number",
    );
}

#[test]
fn allowed_tools_list_of_non_strings() {
    assert_field(
        "triage",
        "---\nname: triage\ndescription: x\nallowed-tools: [Read, {a: b}]\n---\n",
        "allowed-tools[1]",
        "must be a string, found a mapping",
    );
}

#[test]
fn metadata_must_be_a_mapping_of_scalars() {
    assert_field(
        "triage",
        "---\nname: triage\ndescription: x\nmetadata: [a]\n---\n",
        "metadata",
        "must be a mapping of strings to strings, found a list",
    );
    assert_field(
        "triage",
        "---\nname: triage\ndescription: x\nmetadata:\n  nested:\n    a: b\n---\n",
        "metadata.nested",
        "must be a string, number or boolean, found a mapping",
    );
}

#[test]
fn license_must_be_a_string() {
    assert_field("triage", "---\nname: triage\ndescription: x\nlicense: [MIT]\n---\n", "license", "must be a string");
}

#[test]
fn missing_skill_md_names_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("triage");
    fs::create_dir(&dir).unwrap();
    let err = load_skill(&dir).unwrap_err();
    assert_eq!(err.to_string(), format!("no skill \"triage\": {} does not exist", dir.join("SKILL.md").display()));
}

#[test]
fn duplicate_field() {
    let (_tmp, _file, err) = load("triage", "---\nname: triage\nname: triage\ndescription: x\n---\n");
    // Either our rule or the parser's duplicate-key check; both name the key.
    assert!(err.to_string().contains("name"), "{err}");
    assert!(err.to_string().contains("SKILL.md"), "{err}");
}

#[test]
fn crlf_line_endings_are_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("triage");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("SKILL.md"), "---\r\nname: triage\r\ndescription: Triage.\r\n---\r\nBody.\r\n").unwrap();
    let skill = load_skill(&dir).unwrap();
    assert_eq!(skill.metadata.description, "Triage.");
    assert_eq!(skill.instructions, "Body.");
}
