//! Writes every CRD into a directory (one file each, plus kustomization.yaml), or prints
//! them as one stream when no directory is given.
//!
//! An example rather than a binary: it needs k8s-openapi's version feature, which this
//! library crate enables only for its dev targets.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ferrolb_api::crd_files()?;
    match std::env::args_os().nth(1).map(PathBuf::from) {
        Some(dir) => {
            std::fs::create_dir_all(&dir)?;
            for (name, content) in files {
                ferrolb_api::write_atomically(&dir.join(&name), content.as_bytes(), false)?;
                eprintln!("wrote {}", dir.join(name).display());
            }
        }
        None => {
            let mut out = String::new();
            for (name, content) in files {
                if name != "kustomization.yaml" {
                    out.push_str("---\n");
                    out.push_str(&content);
                }
            }
            std::io::Write::write_all(&mut std::io::stdout(), out.as_bytes())?;
        }
    }
    Ok(())
}
