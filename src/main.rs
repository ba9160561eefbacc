//! The `zkdeployment` binary: everything is in the library's `cli` module.

fn main() -> std::process::ExitCode {
    zkdeployment::cli::main()
}
