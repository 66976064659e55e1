//! The binary: the command line goes to [`pipeline_pulse::commands`], which runs it.

fn main() -> std::process::ExitCode {
    pipeline_pulse::commands::main()
}
