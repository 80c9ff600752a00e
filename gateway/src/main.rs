fn main() -> std::process::ExitCode {
    infergate::cli::main()
}
