//! Dashboard build steps that would otherwise need a separately installed tool.
//!
//! `cargo run -p xtask -- bindgen IN.wasm OUT_DIR` generates the JS glue and the processed wasm
//! for `--target web` with the same wasm-bindgen version the app links (pinned in the lock
//! file), because `cargo install wasm-bindgen-cli` does not build here.

#![forbid(unsafe_code)]

use anyhow::{bail, Context};
use std::path::PathBuf;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [cmd, input, out] if cmd == "bindgen" => bindgen(input.into(), out.into()),
        _ => bail!("usage: xtask bindgen IN.wasm OUT_DIR"),
    }
}

fn bindgen(input: PathBuf, out: PathBuf) -> anyhow::Result<()> {
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    wasm_bindgen_cli_support::Bindgen::new()
        .input_path(&input)
        .web(true)?
        .typescript(false)
        .generate(&out)
        .with_context(|| format!("wasm-bindgen on {}", input.display()))?;
    println!("bindgen: {} -> {}", input.display(), out.display());
    Ok(())
}
