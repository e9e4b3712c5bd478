//! The skills unit: finds each skill an agent names (a skill component the
//! operator loaded, else a SKILL.md package in the skills path) and hands
//! its instructions to the model, eagerly in the system prompt or, in
//! progressive mode, through the `activate_skill` tool. A skill adds
//! instructions only; it never widens what the agent may do.

use nexo_model::{BoxFuture, ToolSpec};
use serde_json::{Value, json};

use crate::error::{RunError, ToolError};
use crate::host_call::{DynTool, HostCall, Tool, ToolContext, string_arg};
use crate::manifest::AgentManifest;
use crate::settings::{RunOptions, SkillMode};
use crate::unit::{Setup, Step, Unit};

/// A skill as the model gets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillDoc {
    /// The skill's name.
    pub name: String,
    /// When to use it.
    pub description: String,
    /// Its instructions.
    pub body: String,
}

/// The skills offered through `activate_skill` (progressive mode).
#[derive(Debug, Clone, Default)]
pub struct OfferedSkills(pub Vec<SkillDoc>);

/// The skills unit.
#[derive(Debug, Default, Clone, Copy)]
pub struct SkillsUnit;

impl Unit for SkillsUnit {
    fn name(&self) -> &'static str {
        "skills"
    }

    fn tools(&self) -> &'static [&'static dyn DynTool] {
        &[&ActivateSkill]
    }

    fn prepare<'a>(&'a self, setup: &'a mut Setup<'_>) -> Step<'a> {
        if setup.manifest.skills.is_empty() {
            setup.state.insert(OfferedSkills::default());
            return Step::ready(Ok(()));
        }
        // Skill components are instantiated to read their instructions.
        Step::Wait(Box::pin(async move {
            let skills = resolve(setup.manifest, setup.options).await?;
            let mut offered = Vec::new();
            for skill in skills {
                match setup.options.skill_mode {
                    SkillMode::Eager => setup.instructions.push(format!("# Skill: {}\n\n{}", skill.name, skill.body)),
                    SkillMode::Progressive => offered.push(skill),
                }
            }
            if !offered.is_empty() {
                let list: Vec<String> = offered.iter().map(|s| format!("- {}: {}", s.name, s.description)).collect();
                setup.instructions.push(format!(
                    "Skills are available. Before a task one of them covers, load it with `activate_skill`:\n{}",
                    list.join("\n")
                ));
            }
            setup.state.insert(OfferedSkills(offered));
            Ok(())
        }))
    }
}

/// Finds each skill `manifest` names: first among the skill components in
/// `options`, then in the skills path.
pub async fn resolve(manifest: &AgentManifest, options: &RunOptions) -> Result<Vec<SkillDoc>, RunError> {
    let skills_path = options.skills_path.clone().unwrap_or_else(|| "skills".into());
    let fail = |reason: String| RunError::Skill { agent: manifest.name.clone(), reason };
    let mut found = Vec::new();
    for name in &manifest.skills {
        if let Some(component) = options.providers.skill_components.iter().find(|c| c.name() == name) {
            let body = component.instructions().await.map_err(|e| fail(e.to_string()))?;
            let metadata = component.metadata();
            // Cut as a package's is: a component from a registry is as untrusted.
            let description = crate::truncate::head_chars(&metadata.description, nexo_skills::MAX_DESCRIPTION_LEN);
            found.push(SkillDoc { name: metadata.name.clone(), description, body });
            continue;
        }
        let skill = nexo_skills::find(&skills_path, name).map_err(|e| fail(e.to_string()))?;
        for warning in &skill.warnings {
            tracing::warn!(agent = %manifest.name, "skill `{name}`: {warning}");
        }
        found.push(SkillDoc {
            name: skill.metadata.name,
            // The listing promises at most this much per skill.
            description: crate::truncate::head_chars(&skill.metadata.description, nexo_skills::MAX_DESCRIPTION_LEN),
            body: skill.instructions,
        });
    }
    Ok(found)
}

/// The tool through which the model activates a skill.
pub const ACTIVATE_SKILL: &str = "activate_skill";

/// `activate_skill`: returns a skill's instructions. It reads nothing and
/// grants nothing: a skill's files stay reachable only through the agent's
/// own gated tools. No guest imports it; only the model calls it.
#[derive(Debug, Clone, Copy)]
pub struct ActivateSkill;

impl HostCall for ActivateSkill {
    type Args = String;
    type Output = String;
    type Error = ToolError;

    fn name(&self) -> &'static str {
        "activate-skill"
    }

    fn effect(&self) -> crate::journal::Effect {
        crate::journal::Effect::Read
    }

    fn detail<'a>(&self, name: &'a String) -> std::borrow::Cow<'a, str> {
        std::borrow::Cow::Borrowed(name)
    }

    fn execute<'a>(&'a self, cx: &'a ToolContext, name: String) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let OfferedSkills(skills) = cx.state::<OfferedSkills>()?;
            match skills.iter().find(|s| s.name == name) {
                Some(skill) => Ok(skill.body.clone()),
                None => Err(ToolError::InvalidInput(format!(
                    "there is no skill `{name}`; the skills are: {}",
                    skills.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
                ))),
            }
        })
    }
}

impl Tool for ActivateSkill {
    fn model_name(&self) -> &'static str {
        ACTIVATE_SKILL
    }

    fn offered(&self, cx: &ToolContext) -> bool {
        cx.state::<OfferedSkills>().is_ok_and(|s| !s.0.is_empty())
    }

    fn spec(&self, cx: &ToolContext) -> ToolSpec {
        let names: Vec<&str> =
            cx.state::<OfferedSkills>().map(|s| s.0.iter().map(|s| s.name.as_str()).collect()).unwrap_or_default();
        ToolSpec {
            name: ACTIVATE_SKILL.to_string(),
            description: "Load a skill's full instructions before doing the task it describes.".to_string(),
            parameters: json!({
                "type": "object",
                "properties": { "name": { "type": "string", "enum": names, "description": "The skill's name" } },
                "required": ["name"],
                "additionalProperties": false
            }),
        }
    }

    fn decode(&self, arguments: &Value) -> Result<String, ToolError> {
        // A missing name is an unknown skill, so the model sees the list.
        Ok(string_arg(ACTIVATE_SKILL, arguments, "name").unwrap_or("").to_string())
    }

    fn render(&self, body: &String) -> String {
        body.clone()
    }
}
