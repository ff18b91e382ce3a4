//! Writes every enoki CRD to `crds/manifests/<plural>.<group>.yaml` and
//! `deploy/base/crds/` (or only to the directory given as the first argument).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dirs = match std::env::args().nth(1) {
        Some(dir) => vec![PathBuf::from(dir)],
        None => vec![root.join("manifests"), root.join("../deploy/base/crds")],
    };
    for dir in dirs {
        std::fs::create_dir_all(&dir)?;
        for (file, yaml) in crds::manifests::render()? {
            std::fs::write(dir.join(&file), yaml)?;
            println!("wrote {}", dir.join(file).display());
        }
    }
    // The built-in kinds' CRDs are written by hand in crds/manifests/builtins/; deploy/ gets a
    // copy (kustomize does not load files outside its root).
    if std::env::args().nth(1).is_none() {
        let dir = root.join("../deploy/base/crds/builtins");
        std::fs::create_dir_all(&dir)?;
        for (file, yaml) in crds::manifests::BUILTIN_YAML {
            std::fs::write(dir.join(file), yaml)?;
            println!("wrote {}", dir.join(file).display());
        }
    }
    // Eno's CRDs: opt-in, for a cluster that never ran Eno (`--serve-eno-api`).
    if std::env::args().nth(1).is_none() {
        for dir in [
            root.join("manifests/eno"),
            root.join("../deploy/eno-api/crds"),
        ] {
            std::fs::create_dir_all(&dir)?;
            for (file, yaml) in crds::manifests::render_eno()? {
                std::fs::write(dir.join(&file), yaml)?;
                println!("wrote {}", dir.join(file).display());
            }
        }
    }
    Ok(())
}
