//! Reading an image archive back: its layout, digests and sizes checked ([`inspect`]),
//! and what it holds checked against the Dockerfile ([`check`]).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde_json::{Value, json};

use super::dockerfile::Dockerfile;
use super::layout::{CONFIG, LAYER, MANIFEST, NAME_ANNOTATION, blob_path, sha256, sha256_range};
use super::tar;
use ferrolb_lab::Error;

/// A read-back archive whose layout, digests and sizes are consistent.
#[derive(Debug, Clone)]
pub struct Image {
    /// `io.containerd.image.name` of its manifest.
    pub name: String,
    /// The image configuration (`config.User`, `config.Entrypoint`, ...).
    pub config: Value,
    /// The entries of its one layer.
    pub layer: Vec<tar::Entry>,
    /// Bytes of the archive.
    pub archive_bytes: u64,
    /// Bytes of the layer.
    pub layer_bytes: u64,
}

/// Reads `archive` as an OCI image layout: index.json → manifest → config and layer,
/// every blob's digest and size as its descriptor says, the layer's diff_id its digest.
pub fn inspect(archive: &Path) -> Result<Image, Error> {
    let fail = |problem: String| Error::Image { archive: archive.display().to_string(), problem };
    let mut f = File::open(archive)?;
    let outer: BTreeMap<String, tar::Entry> =
        tar::entries(&mut f, 0, None)?.into_iter().map(|e| (e.path.clone(), e)).collect();
    let read_json = |f: &mut File, path: &str| -> Result<(Value, String, u64), Error> {
        let e = outer.get(path).ok_or_else(|| fail(format!("no {path}")))?;
        if e.size > 1 << 22 {
            return Err(fail(format!("{path}: {} bytes, too large for JSON", e.size)));
        }
        let mut bytes = vec![0; e.size as usize];
        f.seek(SeekFrom::Start(e.offset))?;
        f.read_exact(&mut bytes)?;
        let value = serde_json::from_slice(&bytes).map_err(|err| fail(format!("{path}: {err}")))?;
        Ok((value, sha256(&bytes), e.size))
    };
    let (layout, _, _) = read_json(&mut f, "oci-layout")?;
    if layout["imageLayoutVersion"] != "1.0.0" {
        return Err(fail(format!("oci-layout is {layout}, not imageLayoutVersion 1.0.0")));
    }
    let (index, _, _) = read_json(&mut f, "index.json")?;
    let [desc] = index["manifests"].as_array().map(Vec::as_slice).unwrap_or_default() else {
        return Err(fail(format!("index.json should list one manifest: {index}")));
    };
    let name = desc["annotations"][NAME_ANNOTATION]
        .as_str()
        .ok_or_else(|| fail(format!("index.json: the manifest has no {NAME_ANNOTATION} annotation")))?
        .to_owned();
    // A blob named by `desc`: its digest and size must be what `desc` says.
    let blob = |f: &mut File, desc: &Value, media_type: &str| -> Result<(Value, tar::Entry), Error> {
        if desc["mediaType"] != media_type {
            return Err(fail(format!("{desc}: mediaType is not {media_type}")));
        }
        let digest = desc["digest"].as_str().ok_or_else(|| fail(format!("{desc}: no digest")))?;
        let path = blob_path(digest);
        let entry = outer.get(&path).ok_or_else(|| fail(format!("no blob {path}")))?.clone();
        let actual = if media_type == LAYER {
            sha256_range(f, entry.offset, entry.size)?
        } else {
            read_json(f, &path)?.1
        };
        if actual != digest {
            return Err(fail(format!("{path}: content hashes to {actual}")));
        }
        if desc["size"].as_u64() != Some(entry.size) {
            return Err(fail(format!("{path}: {} bytes, the descriptor says {}", entry.size, desc["size"])));
        }
        let value = if media_type == LAYER { Value::Null } else { read_json(f, &path)?.0 };
        Ok((value, entry))
    };
    let (manifest, _) = blob(&mut f, desc, MANIFEST)?;
    let (config, _) = blob(&mut f, &manifest["config"], CONFIG)?;
    let [layer_desc] = manifest["layers"].as_array().map(Vec::as_slice).unwrap_or_default() else {
        return Err(fail(format!("the manifest should list one layer: {manifest}")));
    };
    let (_, layer) = blob(&mut f, layer_desc, LAYER)?;
    if config["rootfs"] != json!({ "type": "layers", "diff_ids": [layer_desc["digest"]] }) {
        return Err(fail(format!(
            "config rootfs {} does not name the layer {}",
            config["rootfs"], layer_desc["digest"]
        )));
    }
    if (config["architecture"].as_str(), config["os"].as_str()) != (Some("amd64"), Some("linux")) {
        return Err(fail(format!(
            "config is for {}/{}, not linux/amd64",
            config["os"], config["architecture"]
        )));
    }
    let entries = tar::entries(&mut f, layer.offset, Some(layer.size))?;
    Ok(Image { name, config, layer: entries, archive_bytes: f.metadata()?.len(), layer_bytes: layer.size })
}

/// [`inspect`]s `archive` and checks it holds what `dockerfile` builds: each binary
/// executable in its directory and nothing else there, its user (known to /etc/passwd
/// when named by number), entrypoint and command.
pub fn check(archive: &Path, dockerfile: &Dockerfile) -> Result<Image, Error> {
    let image = inspect(archive)?;
    let mut problems = Vec::new();
    let dir = dockerfile.bin_dir.trim_start_matches('/');
    let in_dir: BTreeMap<&str, &tar::Entry> = image
        .layer
        .iter()
        .filter_map(|e| Some((e.path.strip_prefix(dir)?.strip_prefix('/')?, e)))
        .filter(|(name, _)| !name.contains('/'))
        .collect();
    for bin in &dockerfile.binaries {
        match in_dir.get(bin.as_str()) {
            None => problems.push(format!("/{dir}/{bin} is missing")),
            Some(e) if e.kind != tar::Kind::File || e.mode & 0o111 == 0 || e.size == 0 => {
                problems.push(format!("/{dir}/{bin} is not an executable file: {e:?}"))
            }
            Some(_) => {}
        }
    }
    for extra in in_dir.keys().filter(|n| !dockerfile.binaries.iter().any(|b| b == *n)) {
        problems.push(format!("/{dir}/{extra} is not one of the Dockerfile's BINARIES"));
    }
    let c = &image.config["config"];
    if let Some(user) = &dockerfile.user
        && c["User"] != user.as_str()
    {
        problems.push(format!("User is {}, the Dockerfile says {user}", c["User"]));
    }
    for (key, want) in [("Entrypoint", &dockerfile.entrypoint), ("Cmd", &dockerfile.cmd)] {
        let want = want.as_ref().map_or(Value::Null, |w| json!(w));
        if c[key] != want {
            problems.push(format!("{key} is {}, the Dockerfile says {want}", c[key]));
        }
    }
    let uid = c["User"].as_str().unwrap_or_default().split(':').next().unwrap_or_default().to_owned();
    if !uid.is_empty() && uid.bytes().all(|b| b.is_ascii_digit()) {
        let passwd = layer_file(archive, &image, "etc/passwd").unwrap_or_default();
        if !passwd.lines().any(|l| l.split(':').nth(2) == Some(uid.as_str())) {
            problems.push(format!("/etc/passwd has no user {uid}"));
        }
    }
    if problems.is_empty() {
        Ok(image)
    } else {
        Err(Error::Image { archive: archive.display().to_string(), problem: problems.join("; ") })
    }
}

/// A small text file of the layer of `image` (read from `archive`).
pub fn layer_file(archive: &Path, image: &Image, path: &str) -> Result<String, Error> {
    let e = image.layer.iter().find(|e| e.path == path && e.kind == tar::Kind::File).ok_or_else(|| {
        Error::Image { archive: archive.display().to_string(), problem: format!("no /{path}") }
    })?;
    let mut f = File::open(archive)?;
    f.seek(SeekFrom::Start(e.offset))?;
    let mut text = String::new();
    f.take(e.size).read_to_string(&mut text)?;
    Ok(text)
}
