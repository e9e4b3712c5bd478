//! Plays the host in the orphan tests.
fn main() {}
