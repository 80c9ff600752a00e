//! `infergate-plugin-build OUT_DIR MODULE.wasm...`: wraps each core module
//! built by `wit-bindgen` for wasm32-unknown-unknown into a component, written
//! to `OUT_DIR/<name>.wasm` with `_` in the file name turned into `-`.
//!
//! This is `wasm-tools component new` as a library call, so setup and CI
//! need not `cargo install wasm-tools`.

#![forbid(unsafe_code)]

use anyhow::{bail, Context, Result};
use std::{env, fs, path::Path};
use wit_component::ComponentEncoder;

fn main() -> Result<()> {
    let mut args = env::args_os().skip(1);
    let Some(out_dir) = args.next() else {
        bail!("usage: infergate-plugin-build OUT_DIR MODULE.wasm...");
    };
    let out_dir = Path::new(&out_dir);
    fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    for module in args {
        let module = Path::new(&module);
        let out = out_dir.join(component_file_name(module)?);
        componentize(module, &out)?;
        println!("{} -> {}", module.display(), out.display());
    }
    Ok(())
}

fn component_file_name(module: &Path) -> Result<String> {
    let stem = module
        .file_stem()
        .and_then(|s| s.to_str())
        .with_context(|| format!("{} has no UTF-8 file name", module.display()))?;
    Ok(format!("{}.wasm", stem.replace('_', "-")))
}

fn componentize(module: &Path, out: &Path) -> Result<()> {
    let bytes = fs::read(module).with_context(|| format!("reading {}", module.display()))?;
    let component = ComponentEncoder::default()
        .validate(true)
        .module(&bytes)
        .with_context(|| {
            format!(
                "{}: no component metadata (built with wit-bindgen?)",
                module.display()
            )
        })?
        .encode()
        .with_context(|| format!("encoding {} as a component", module.display()))?;
    // Write then rename, so an interrupted build never leaves a truncated plugin.
    let tmp = out.with_extension("wasm.tmp");
    fs::write(&tmp, &component).with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, out).with_context(|| format!("renaming to {}", out.display()))?;
    Ok(())
}
