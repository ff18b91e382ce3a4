//! Writes every enoki CRD to `crds/manifests/<plural>.<group>.yaml` (or the directory given
//! as the first argument).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("manifests"));
    std::fs::create_dir_all(&dir)?;
    for (file, yaml) in crds::manifests::render()? {
        std::fs::write(dir.join(&file), yaml)?;
        println!("wrote {}", dir.join(file).display());
    }
    Ok(())
}
