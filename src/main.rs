//! The `trigd` binary: the command line in [`trigd::cli`].
#![deny(unsafe_code)]

fn main() -> std::process::ExitCode {
    trigd::cli::main()
}
