//! An agent with its own `run`: it measures the input text without calling
//! the model, so it runs offline. It shows logging and a custom run.

use nexo_sdk::agent::{info, Agent, Manifest, RunError};

struct TextStats;

impl Agent for TextStats {
    fn manifest() -> Manifest {
        Manifest::new("text-stats", "Counts the lines, words and characters of its input")
            .instructions("Report statistics about the given text.")
            .max_turns(1)
    }

    fn run(input: String) -> Result<String, RunError> {
        if input.trim().is_empty() {
            return Err(RunError::Failed("the input is empty: pass some text to measure".into()));
        }
        let lines = input.lines().count();
        let words: Vec<&str> = input.split_whitespace().collect();
        let chars = input.chars().count();
        let longest = words.iter().copied().max_by_key(|w| w.chars().count()).unwrap_or("");
        info(&format!("measured {chars} characters"));
        Ok(format!("lines: {lines}\nwords: {}\ncharacters: {chars}\nlongest word: {longest}", words.len()))
    }
}

nexo_sdk::export_agent!(TextStats);
