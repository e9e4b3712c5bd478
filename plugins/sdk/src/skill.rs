//! The skill world: implement [`Skill`] and export it with
//! [`export_skill!`](crate::export_skill). A skill is data only: its world
//! imports nothing that carries authority.

use alloc::string::String;
use alloc::vec::Vec;

/// Raw bindings generated from `wit/` for the `skill-plugin` world.
#[allow(missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "nexo:plugin/skill-plugin",
        pub_export_macro: true,
        export_macro_name: "__export_skill_plugin",
        default_bindings_module: "nexo_sdk::skill::bindings",
        runtime_path: "nexo_sdk::__wit_bindgen::rt",
    });
}

pub use bindings::exports::nexo::plugin::skill::SkillMetadata as Metadata;

/// A skill.
pub trait Skill {
    /// The skill's name, description and optional fields.
    fn metadata() -> Metadata;

    /// The instructions (the Markdown body of `SKILL.md`).
    fn instructions() -> String;

    /// Bundled files as `(relative path, contents)` pairs, for example
    /// `("references/style.md", include_str!("../references/style.md"))`.
    fn files() -> &'static [(&'static str, &'static str)] {
        &[]
    }
}

impl Metadata {
    /// Metadata with a name and a description; every optional field empty.
    pub fn new(name: &str, description: &str) -> Self {
        Metadata {
            name: name.into(),
            description: description.into(),
            license: None,
            compatibility: None,
            allowed_tools: Vec::new(),
            extra: Vec::new(),
        }
    }
}

impl<T: Skill> bindings::exports::nexo::plugin::skill::Guest for T {
    fn metadata() -> Metadata {
        <T as Skill>::metadata()
    }

    fn instructions() -> String {
        <T as Skill>::instructions()
    }

    fn resources() -> Vec<String> {
        T::files().iter().map(|(path, _)| String::from(*path)).collect()
    }

    fn read_resource(path: String) -> Option<String> {
        T::files().iter().find(|(p, _)| *p == path).map(|(_, body)| String::from(*body))
    }
}

/// Exports a type that implements [`Skill`] as this component's skill.
#[macro_export]
macro_rules! export_skill {
    ($ty:ident) => {
        $crate::skill::bindings::__export_skill_plugin!($ty);
    };
}
