#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    infergate::cli::main()
}
