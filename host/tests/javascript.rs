//! The JavaScript example agent (`examples/js-agent`), built with
//! ComponentizeJS against `wit/` alone, run through the real `nexo` binary.
//!
//! The build needs ComponentizeJS (npm): `scripts/js-deps.sh` installs it
//! (`make test` and CI run it). Without it these tests fail and say so.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failure should panic

mod common;
mod guest_agent;

use guest_agent::Guest;

fn javascript() -> Guest {
    Guest { path: nexo_tests::guests::js_agent(), name: "js-agent", label: "javascript" }
}

#[test]
fn inspect_shows_world_and_manifest() {
    guest_agent::inspect_shows_world_and_manifest(&javascript());
}

#[test]
fn run_without_a_model_surveys_the_workspace() {
    guest_agent::run_without_a_model_surveys_the_workspace(&javascript());
}

#[test]
fn run_with_a_scripted_model_answers() {
    guest_agent::run_with_a_scripted_model_answers(&javascript());
}

#[test]
fn errors_and_the_memory_floor() {
    guest_agent::errors_and_the_memory_floor(&javascript());
}

#[test]
fn costs_next_to_rust() {
    guest_agent::costs_next_to_rust(&javascript());
}
