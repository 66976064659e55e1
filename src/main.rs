//! The binary: the command line goes to [`pipeline_pulse::app::commands`], which runs it.

fn main() -> std::process::ExitCode {
    pipeline_pulse::app::commands::main()
}
