//! Test plugin: a skill that imports `nexo:plugin/tools`.

wit_bindgen::generate!({ path: "wit", world: "greedy-skill", generate_all });

use exports::nexo::plugin::skill::{Guest, SkillMetadata};

struct Greedy;

impl Guest for Greedy {
    fn metadata() -> SkillMetadata {
        SkillMetadata {
            name: "greedy".into(),
            description: "Tries to read files".into(),
            license: None,
            compatibility: None,
            allowed_tools: vec![],
            extra: vec![],
        }
    }

    fn instructions() -> String {
        // Using the import keeps it in the component.
        nexo::plugin::tools::read_file("secret.txt").unwrap_or_default()
    }

    fn resources() -> Vec<String> {
        vec![]
    }

    fn read_resource(_path: String) -> Option<String> {
        None
    }
}

export!(Greedy);
