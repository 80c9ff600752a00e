//! Embeds the dashboard's built files (`dashboard/dist`) so the binary alone is the server.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    embed_dashboard()
}

/// Writes `$OUT_DIR/dashboard_files.rs`: a sorted `(relative path, include_bytes!)` table of
/// every file under `dashboard/dist`. A missing directory still compiles (the gRPC, API and
/// CLI work without a dashboard; `cargo test` must not need the wasm toolchain): the table is
/// empty, cargo prints a warning, and the server answers 503 at `/` saying how to build it.
fn embed_dashboard() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let dist = manifest.join("../../dashboard/dist");
    // A directory is scanned recursively, so a rebuilt dashboard re-embeds; a missing one
    // reruns this script on every build until it exists.
    println!("cargo:rerun-if-changed={}", dist.display());
    let mut files = Vec::new();
    if dist.join("index.html").is_file() {
        collect(&dist, &dist, &mut files)?;
    } else {
        println!(
            "cargo:warning=dashboard/dist is not built: this binary serves no dashboard (503 at /) \
             unless given --dashboard-dir; run `bash dashboard/build.sh` and rebuild to embed it"
        );
    }
    files.sort();
    let mut table = String::from("pub static FILES: &[(&str, &[u8])] = &[\n");
    for (relative, absolute) in &files {
        writeln!(table, "    ({relative:?}, include_bytes!({absolute:?})),")?;
    }
    table.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("dashboard_files.rs");
    std::fs::write(out, table)?;
    Ok(())
}

fn collect(
    root: &Path,
    dir: &Path,
    files: &mut Vec<(String, String)>,
) -> Result<(), Box<dyn std::error::Error>> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(root, &path, files)?;
        } else if path.is_file() {
            let relative = path
                .strip_prefix(root)?
                .to_str()
                .ok_or_else(|| format!("{}: dashboard file names must be UTF-8", path.display()))?;
            let absolute = path.canonicalize()?;
            let absolute = absolute
                .to_str()
                .ok_or_else(|| format!("{}: path must be UTF-8", absolute.display()))?;
            // URL paths use '/', whatever the build host's separator.
            files.push((relative.replace('\\', "/"), absolute.to_string()));
        }
    }
    Ok(())
}
