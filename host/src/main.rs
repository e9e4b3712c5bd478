//! The `nexo` command-line program.

#[macro_use]
mod cli;
mod server;

fn main() -> std::process::ExitCode {
    cli::main()
}
