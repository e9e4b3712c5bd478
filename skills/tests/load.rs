//! Loading well-formed packages shaped like public collections, discovery,
//! symlinks and scaffolding.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

use nexo_skills::{MAX_DESCRIPTION_LEN, PLACEHOLDER_DESCRIPTION, SkillError, SkillSet, find, load_skill, scaffold};

fn collection() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/collection")
}

#[test]
fn folded_description_metadata_string_tools_and_deep_resources() {
    let skill = load_skill(&collection().join("pdf-processing")).unwrap();
    let m = &skill.metadata;
    assert_eq!(m.name, "pdf-processing");
    assert_eq!(
        m.description,
        "Extract text and tables from PDF files, fill PDF forms, and merge documents. \
         Use when the user mentions PDFs, forms or document extraction."
    );
    assert_eq!(m.license.as_deref(), Some("Apache-2.0"));
    assert_eq!(m.compatibility.as_deref(), Some("Requires python3 and pdfplumber"));
    assert_eq!(m.allowed_tools, ["Bash(python3:*)", "Read", "Write"]);
    assert_eq!(m.extra.get("author").map(String::as_str), Some("example-org"));
    // Numbers and booleans in `metadata` become text.
    assert_eq!(m.extra.get("version").map(String::as_str), Some("1.5"));
    assert_eq!(m.extra.get("revision").map(String::as_str), Some("3"));
    assert_eq!(m.extra.get("reviewed").map(String::as_str), Some("true"));
    assert_eq!(m.extra.len(), 4);
    assert!(skill.instructions.starts_with("# PDF processing"));
    assert!(skill.instructions.ends_with("(references/api/v2/endpoints.md)."));
    assert_eq!(
        skill.resources,
        ["assets/letter-template.txt", "references/api/v2/endpoints.md", "references/guide.md", "scripts/extract.py",]
    );
    assert_eq!(skill.dir, collection().join("pdf-processing"));
}

#[test]
fn literal_description_and_tools_list() {
    let skill = load_skill(&collection().join("code-review")).unwrap();
    assert_eq!(
        skill.metadata.description,
        "Review a change for correctness, style and tests.\nUse when asked to review a diff or a pull request."
    );
    assert_eq!(skill.metadata.allowed_tools, ["Read", "Grep", "Bash(git diff:*)"]);
    assert!(skill.metadata.extra.is_empty());
    assert_eq!(skill.metadata.license, None);
    assert!(skill.resources.is_empty());
    assert_eq!(
        skill.instructions,
        "Read the diff, then the files it touches.\n\nReport problems in order of severity."
    );
}

#[test]
fn skill_set_discovers_every_package() {
    let set = SkillSet::load(&collection()).unwrap();
    assert_eq!(set.len(), 2);
    assert_eq!(set.names().collect::<Vec<_>>(), ["code-review", "pdf-processing"]);
    assert_eq!(set.get("code-review").unwrap().name(), "code-review");
    assert!(set.get("missing").is_none());
}

#[test]
fn missing_skills_dir_is_an_empty_set() {
    let tmp = tempfile::tempdir().unwrap();
    let set = SkillSet::load(&tmp.path().join("skills")).unwrap();
    assert!(set.is_empty());
}

#[test]
fn skill_set_skips_hidden_dirs_and_files() {
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir(tmp.path().join(".git")).unwrap();
    fs::write(tmp.path().join("README.md"), "not a skill").unwrap();
    scaffold(tmp.path(), "triage").unwrap();
    let set = SkillSet::load(tmp.path()).unwrap();
    assert_eq!(set.names().collect::<Vec<_>>(), ["triage"]);
}

#[test]
fn skill_set_reports_an_invalid_package() {
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir(tmp.path().join("empty")).unwrap();
    let err = SkillSet::load(tmp.path()).unwrap_err();
    assert!(matches!(err, SkillError::NotFound { .. }), "{err}");
}

#[test]
fn find_loads_by_name_and_names_the_missing_path() {
    assert_eq!(find(&collection(), "code-review").unwrap().name(), "code-review");
    let err = find(Path::new("skills"), "triage").unwrap_err();
    assert!(matches!(err, SkillError::NotFound { .. }));
    assert_eq!(err.to_string(), "no skill \"triage\": skills/triage/SKILL.md does not exist");
}

#[test]
fn find_refuses_a_name_that_could_escape() {
    let err = find(&collection(), "../collection").unwrap_err();
    assert!(matches!(&err, SkillError::Field { field, .. } if field == "name"), "{err}");
}

#[cfg(unix)]
#[test]
fn symlinks_out_of_the_skill_are_not_listed_or_followed() {
    use std::os::unix::fs::symlink;

    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    fs::create_dir_all(outside.join("dir")).unwrap();
    fs::write(outside.join("secret.txt"), "secret").unwrap();
    fs::write(outside.join("dir/inner.txt"), "inner").unwrap();

    let skills = tmp.path().join("skills");
    let dir = scaffold(&skills, "linked").unwrap();
    let refs = dir.join("references");
    fs::write(refs.join("real.md"), "real").unwrap();
    symlink(outside.join("secret.txt"), refs.join("secret.txt")).unwrap();
    symlink(outside.join("dir"), refs.join("dir")).unwrap();
    symlink(refs.join("nowhere"), refs.join("broken.md")).unwrap();
    // A link to a file inside the skill stays inside: it is listed.
    symlink(refs.join("real.md"), refs.join("alias.md")).unwrap();
    // A whole resource directory that is a symlink is not descended.
    symlink(&outside, dir.join("assets")).unwrap();

    let skill = load_skill(&dir).unwrap();
    // Hidden files (the scaffold's `references/.keep`) are not resources.
    assert_eq!(skill.resources, ["references/alias.md", "references/real.md"]);
}

#[test]
fn scaffold_round_trips_through_load_skill() {
    let tmp = tempfile::tempdir().unwrap();
    let skills = tmp.path().join("skills");
    let dir = scaffold(&skills, "incident-triage").unwrap();
    assert_eq!(dir, skills.join("incident-triage"));
    assert!(dir.join("references/.keep").is_file());

    let skill = load_skill(&dir).unwrap();
    assert_eq!(skill.metadata.name, "incident-triage");
    assert_eq!(skill.metadata.description, PLACEHOLDER_DESCRIPTION);
    assert!(skill.instructions.starts_with("# Incident Triage"));
    assert!(skill.resources.is_empty(), "the placeholder .keep is not a resource: {:?}", skill.resources);
    assert_eq!(find(&skills, "incident-triage").unwrap(), skill);
}

#[test]
fn scaffold_never_overwrites() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = scaffold(tmp.path(), "triage").unwrap();
    fs::write(dir.join("SKILL.md"), "edited").unwrap();

    let err = scaffold(tmp.path(), "triage").unwrap_err();
    assert!(matches!(err, SkillError::AlreadyExists { .. }));
    assert!(err.to_string().contains("already exists"), "{err}");
    assert_eq!(fs::read_to_string(dir.join("SKILL.md")).unwrap(), "edited");

    // A plain file in the way is not replaced either.
    fs::write(tmp.path().join("notes"), "mine").unwrap();
    assert!(matches!(scaffold(tmp.path(), "notes").unwrap_err(), SkillError::AlreadyExists { .. }));
    assert_eq!(fs::read_to_string(tmp.path().join("notes")).unwrap(), "mine");
}

#[test]
fn scaffold_refuses_invalid_names() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["Triage", "-triage", "tri--age", "", "../up", &"a".repeat(65)] {
        let err = scaffold(tmp.path(), name).unwrap_err();
        assert!(matches!(&err, SkillError::Field { field, .. } if field == "name"), "{name:?}: {err}");
    }
    assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 0, "nothing was created");
}

#[test]
fn an_over_long_description_fails_the_check_but_loads_for_an_agent_with_a_warning() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/long-description");
    // `nexo skill check` stays strict.
    let err = load_skill(&dir.join("api-guide")).unwrap_err();
    assert!(matches!(&err, SkillError::Field { field, .. } if field == "description"), "{err}");
    assert!(SkillSet::load(&dir).is_err());
    // An agent that names it still gets it, and is told why it is unusual.
    let skill = find(&dir, "api-guide").unwrap();
    assert!(skill.metadata.description.chars().count() > MAX_DESCRIPTION_LEN);
    assert_eq!(skill.resources, ["references/requests.md"]);
    assert_eq!(skill.warnings.len(), 1, "{:?}", skill.warnings);
    assert!(skill.warnings[0].contains("characters long; at most 1024"), "{:?}", skill.warnings);
    // Any other fault still fails, lenient or not.
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("api-guide");
    fs::create_dir(&bad).unwrap();
    let text =
        fs::read_to_string(dir.join("api-guide/SKILL.md")).unwrap().replace("name: api-guide", "name: Api_Guide");
    fs::write(bad.join("SKILL.md"), text).unwrap();
    assert!(find(tmp.path(), "api-guide").is_err());
}
