//! The OCI image layout both sides share: writing a linux/amd64 archive of one
//! uncompressed layer, its media types, blob paths and `sha256:` digests.

use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::tar;
use ferrolb_lab::Error;

pub(super) const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub(super) const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub(super) const LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
const INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub(super) const NAME_ANNOTATION: &str = "io.containerd.image.name";
const REF_ANNOTATION: &str = "org.opencontainers.image.ref.name";

/// An archive written by [`build`](super::build).
#[derive(Debug, Clone)]
pub struct Built {
    /// The archive.
    pub archive: PathBuf,
    /// Its name for containerd (`io.containerd.image.name`).
    pub name: String,
    /// Bytes of the archive.
    pub archive_bytes: u64,
    /// Bytes of its one (uncompressed) layer.
    pub layer_bytes: u64,
}

/// Writes a linux/amd64 OCI image archive with one uncompressed layer to `out`: the
/// layer's entries come from `layer`, `config` is the image configuration's `config`
/// object (`User`, `Entrypoint`, `Env`...), `name` its `io.containerd.image.name`.
pub fn write_image(
    out: &Path,
    name: &str,
    config: Value,
    history: &str,
    layer: impl FnOnce(&mut tar::Writer<&mut dyn Write>) -> io::Result<()>,
) -> Result<Built, Error> {
    // The layer goes to a file first: its digest names it inside the archive.
    let layer_path = out.with_extension("layer.tmp");
    let result = write_image_via(out, name, config, history, layer, &layer_path);
    let _ = std::fs::remove_file(&layer_path);
    result
}

fn write_image_via(
    out: &Path,
    name: &str,
    config: Value,
    history: &str,
    layer: impl FnOnce(&mut tar::Writer<&mut dyn Write>) -> io::Result<()>,
    layer_path: &Path,
) -> Result<Built, Error> {
    let layer = {
        let mut hashing = Hashing::new(BufWriter::new(File::create(layer_path)?));
        let mut w = tar::Writer::new(&mut hashing as &mut dyn Write);
        layer(&mut w)?;
        w.finish()?;
        let (digest, size, mut inner) = hashing.done();
        inner.flush()?;
        (digest, size)
    };
    let config = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": { "type": "layers", "diff_ids": [layer.0] },
        "history": [{ "created_by": history }],
    });
    let config = serde_json::to_vec(&config).map_err(io::Error::other)?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": { "mediaType": CONFIG, "digest": sha256(&config), "size": config.len() },
        "layers": [{ "mediaType": LAYER, "digest": layer.0, "size": layer.1 }],
    }))
    .map_err(io::Error::other)?;
    let tag = tag_of(name);
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [{
            "mediaType": MANIFEST,
            "digest": sha256(&manifest),
            "size": manifest.len(),
            "annotations": { NAME_ANNOTATION: name, REF_ANNOTATION: tag },
        }],
    }))
    .map_err(io::Error::other)?;

    let mut w = tar::Writer::new(BufWriter::new(File::create(out)?));
    let layout = br#"{"imageLayoutVersion":"1.0.0"}"#;
    w.file("oci-layout", 0o644, layout.len() as u64, &mut &layout[..])?;
    w.file("index.json", 0o644, index.len() as u64, &mut index.as_slice())?;
    w.dir("blobs", 0o755, 0, 0)?;
    w.dir("blobs/sha256", 0o755, 0, 0)?;
    for blob in [&manifest, &config] {
        w.file(&blob_path(&sha256(blob)), 0o644, blob.len() as u64, &mut blob.as_slice())?;
    }
    w.file(&blob_path(&layer.0), 0o644, layer.1, &mut File::open(layer_path)?)?;
    w.finish()?.flush()?;
    Ok(Built {
        archive: out.to_owned(),
        name: name.to_owned(),
        archive_bytes: std::fs::metadata(out)?.len(),
        layer_bytes: layer.1,
    })
}

/// The tag of an image name: `latest` when it has none.
pub(super) fn tag_of(name: &str) -> &str {
    name.rsplit_once(':').filter(|(_, t)| !t.contains('/')).map_or("latest", |(_, t)| t)
}

pub(super) fn blob_path(digest: &str) -> String {
    format!("blobs/{}", digest.replacen(':', "/", 1))
}

pub(super) fn sha256(bytes: &[u8]) -> String {
    hex_digest(&Sha256::digest(bytes))
}

fn hex_digest(bytes: &[u8]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

pub(super) fn sha256_range(f: &mut File, offset: u64, size: u64) -> Result<String, Error> {
    f.seek(SeekFrom::Start(offset))?;
    let mut h = Hashing::new(io::sink());
    io::copy(&mut f.take(size), &mut h)?;
    Ok(h.done().0)
}

/// A writer that hashes and counts what passes through it.
struct Hashing<W> {
    inner: W,
    hash: Sha256,
    bytes: u64,
}

impl<W: Write> Hashing<W> {
    fn new(inner: W) -> Self {
        Hashing { inner, hash: Sha256::new(), bytes: 0 }
    }

    /// The `sha256:…` digest, the byte count and the inner writer.
    fn done(self) -> (String, u64, W) {
        (hex_digest(&self.hash.finalize()), self.bytes, self.inner)
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
