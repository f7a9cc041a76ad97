//! The ferrolb image without a registry: an OCI image archive that `ctr images import`
//! takes, assembled from the workspace's binaries the way the Dockerfile assembles the
//! published image (same binaries, same user, same entrypoint), and checked against it.
//!
//! The Dockerfile stays the published recipe. Its base (distroless cc-debian12:nonroot)
//! is rebuilt here from the host: the users it defines, its directories and environment,
//! the CA certificates, and the shared libraries `ldd` says the binaries load.

pub mod containerd;
pub mod tar;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::Error;

/// The name `ctr images import` gives the image unless told otherwise.
pub const DEFAULT_NAME: &str = "docker.io/library/ferrolb:dev";

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const NAME_ANNOTATION: &str = "io.containerd.image.name";
const REF_ANNOTATION: &str = "org.opencontainers.image.ref.name";
/// The image configuration label naming its version: the tag it was built for.
pub const VERSION_LABEL: &str = "org.opencontainers.image.version";

/// What the repository's Dockerfile puts in the published image's final stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dockerfile {
    /// The final stage's `FROM`.
    pub base: String,
    /// `ARG BINARIES`: the binaries copied into the image.
    pub binaries: Vec<String>,
    /// Where `COPY --from=build /out/ DIR` puts them (no trailing slash).
    pub bin_dir: String,
    /// `USER`, when the final stage sets one.
    pub user: Option<String>,
    /// `ENTRYPOINT` (exec form).
    pub entrypoint: Option<Vec<String>>,
    /// `CMD` (exec form).
    pub cmd: Option<Vec<String>>,
    /// `ENV KEY=VALUE` of the final stage.
    pub env: Vec<String>,
}

impl Dockerfile {
    /// The workspace's `Dockerfile`.
    pub fn workspace() -> Result<Self, Error> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("Dockerfile");
        Self::parse(&std::fs::read_to_string(&path)?)
    }

    /// Reads the instructions the image depends on (continuation lines are not needed).
    pub fn parse(text: &str) -> Result<Self, Error> {
        let bad = |what: &str| Error::Parse(format!("Dockerfile: {what}"));
        let exec_form = |instr: &str, rest: &str| {
            serde_json::from_str::<Vec<String>>(rest.trim())
                .map_err(|e| bad(&format!("{instr} {rest}: only the exec form [\"...\"] is supported ({e})")))
        };
        let mut binaries = None;
        let mut last_stage = Vec::new();
        for line in text.lines().map(str::trim) {
            if let Some(list) = line.strip_prefix("ARG BINARIES=") {
                binaries = Some(list.trim_matches('"').split_whitespace().map(String::from).collect());
            }
            if line.starts_with("FROM ") {
                last_stage.clear();
            }
            last_stage.push(line);
        }
        let mut d = Dockerfile {
            base: String::new(),
            binaries: binaries.ok_or_else(|| bad("no ARG BINARIES=\"...\""))?,
            bin_dir: String::new(),
            user: None,
            entrypoint: None,
            cmd: None,
            env: Vec::new(),
        };
        for line in last_stage {
            let (instr, rest) = line.split_once(' ').unwrap_or((line, ""));
            match instr {
                "FROM" => d.base = rest.split_whitespace().next().unwrap_or_default().to_owned(),
                "COPY" => {
                    if let Some(dest) = rest.strip_prefix("--from=build /out/ ") {
                        d.bin_dir = dest.trim().trim_end_matches('/').to_owned();
                    }
                }
                "USER" => d.user = Some(rest.trim().to_owned()),
                "ENTRYPOINT" => d.entrypoint = Some(exec_form(instr, rest)?),
                "CMD" => d.cmd = Some(exec_form(instr, rest)?),
                "ENV" => d.env.push(rest.trim().to_owned()),
                _ => {}
            }
        }
        if d.base.is_empty() {
            return Err(bad("no FROM"));
        }
        if d.bin_dir.is_empty() {
            return Err(bad("the final stage has no `COPY --from=build /out/ DIR`"));
        }
        Ok(d)
    }
}

/// What the Dockerfile's base image contributes, assembled locally.
struct Base {
    image: &'static str,
    user: &'static str,
    working_dir: &'static str,
    env: &'static [&'static str],
    passwd: &'static str,
    group: &'static str,
    /// Directories beyond the files' parents: (path, mode, uid/gid).
    dirs: &'static [(&'static str, u32, u32)],
    ca_bundle: &'static str,
}

/// gcr.io/distroless/cc-debian12:nonroot: glibc, libgcc, CA certificates, no shell.
const DISTROLESS_CC_NONROOT: Base = Base {
    image: "gcr.io/distroless/cc-debian12:nonroot",
    user: "65532",
    working_dir: "/home/nonroot",
    env: &[
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
    ],
    passwd: "root:x:0:0:root:/root:/sbin/nologin\n\
             nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n\
             nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
    group: "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n",
    dirs: &[("root", 0o700, 0), ("home/nonroot", 0o700, 65532), ("tmp", 0o1777, 0)],
    ca_bundle: "etc/ssl/certs/ca-certificates.crt",
};

/// An archive written by [`build`].
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

/// The workspace's binaries the Dockerfile ships, built for `profile` (see
/// [`crate::binary::workspace`]).
pub fn workspace_binaries(dockerfile: &Dockerfile, profile: &str) -> Result<Vec<(String, PathBuf)>, Error> {
    dockerfile
        .binaries
        .iter()
        .map(|name| Ok((name.clone(), crate::binary::workspace(name, profile)?)))
        .collect()
}

/// Writes the OCI image archive of `binaries` (name, path on the host) to `out`, named
/// `name`, with the user, entrypoint and environment `dockerfile` gives the image.
pub fn build(
    dockerfile: &Dockerfile,
    binaries: &[(String, PathBuf)],
    name: &str,
    out: &Path,
) -> Result<Built, Error> {
    let base = [DISTROLESS_CC_NONROOT].into_iter().find(|b| b.image == dockerfile.base).ok_or_else(|| {
        Error::Missing(format!(
            "the Dockerfile's base {} is not one testbed/src/image/mod.rs knows how to assemble; \
             describe it there beside {}",
            dockerfile.base, DISTROLESS_CC_NONROOT.image
        ))
    })?;
    write_archive(dockerfile, &base, binaries, name, out)
}

/// A file of the layer: where its content comes from.
enum Content {
    Host(PathBuf),
    Text(String),
}

fn write_archive(
    dockerfile: &Dockerfile,
    base: &Base,
    binaries: &[(String, PathBuf)],
    name: &str,
    out: &Path,
) -> Result<Built, Error> {
    let ca = Path::new("/").join(base.ca_bundle);
    if !ca.exists() {
        return Err(Error::Missing(format!("{}: install ca-certificates", ca.display())));
    }
    // path → (mode, content); parents become directories below.
    let mut files: BTreeMap<String, (u32, Content)> = BTreeMap::new();
    for (bin, path) in binaries {
        files.insert(
            format!("{}/{bin}", dockerfile.bin_dir.trim_start_matches('/')),
            (0o755, Content::Host(path.clone())),
        );
    }
    for lib in shared_libraries(binaries.iter().map(|(_, p)| p.as_path()))? {
        // At the path the binaries name (the loader's /lib64 link becomes its file).
        let inside = lib.to_string_lossy().trim_start_matches('/').to_owned();
        let real = std::fs::canonicalize(&lib)?;
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&real)?.permissions()) & 0o7777;
        files.insert(inside, (mode, Content::Host(real)));
    }
    files.insert("etc/passwd".into(), (0o644, Content::Text(base.passwd.into())));
    files.insert("etc/group".into(), (0o644, Content::Text(base.group.into())));
    files.insert("etc/nsswitch.conf".into(), (0o644, Content::Text("hosts: files dns\n".into())));
    files.insert(base.ca_bundle.into(), (0o644, Content::Host(ca)));

    let mut dirs: BTreeMap<String, (u32, u32)> =
        base.dirs.iter().map(|&(d, mode, owner)| (d.to_owned(), (mode, owner))).collect();
    let mut parents = BTreeSet::new();
    for path in files.keys().map(String::as_str).chain(base.dirs.iter().map(|(d, _, _)| *d)) {
        let mut at = path;
        while let Some((parent, _)) = at.rsplit_once('/') {
            parents.insert(parent.to_owned());
            at = parent;
        }
    }
    for p in parents {
        dirs.entry(p).or_insert((0o755, 0));
    }

    let mut env: Vec<String> = base.env.iter().map(|e| e.to_string()).collect();
    for e in &dockerfile.env {
        let key = e.split('=').next().unwrap_or_default();
        env.retain(|old| old.split('=').next() != Some(key));
        env.push(e.clone());
    }
    let mut config = json!({
        "User": dockerfile.user.as_deref().unwrap_or(base.user),
        "Env": env,
        "WorkingDir": base.working_dir,
    });
    // What a release build stamps: two tags are two images (image IDs), as two versions
    // are, sharing the one layer of the same binaries.
    config["Labels"] = json!({ VERSION_LABEL: tag_of(name) });
    if let Some(entrypoint) = &dockerfile.entrypoint {
        config["Entrypoint"] = json!(entrypoint);
    }
    if let Some(cmd) = &dockerfile.cmd {
        config["Cmd"] = json!(cmd);
    }
    let history = format!(
        "ferrolb-testbed image build: {} assembled locally, COPY /out/ {}/",
        base.image, dockerfile.bin_dir
    );
    // The layer: directories before what they hold (sorted paths put parents first).
    let mut entries: BTreeMap<&str, Option<&(u32, Content)>> = BTreeMap::new();
    for d in dirs.keys() {
        entries.insert(d, None);
    }
    for (f, c) in &files {
        entries.insert(f, Some(c));
    }
    write_image(out, name, config, &history, |w| {
        for (path, entry) in entries {
            match entry {
                None => {
                    let (mode, owner) = dirs[path];
                    w.dir(path, mode, owner, owner)?;
                }
                Some((mode, Content::Host(src))) => {
                    let mut f = File::open(src)?;
                    let size = f.metadata()?.len();
                    w.file(path, *mode, size, &mut f)?;
                }
                Some((mode, Content::Text(text))) => {
                    w.file(path, *mode, text.len() as u64, &mut text.as_bytes())?;
                }
            }
        }
        Ok(())
    })
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
fn tag_of(name: &str) -> &str {
    name.rsplit_once(':').filter(|(_, t)| !t.contains('/')).map_or("latest", |(_, t)| t)
}

/// The shared libraries (and the loader) `ldd` says `binaries` load; none when static.
fn shared_libraries<'a>(binaries: impl Iterator<Item = &'a Path>) -> Result<BTreeSet<PathBuf>, Error> {
    let mut libs = BTreeSet::new();
    for bin in binaries {
        let out = Command::new("ldd").arg(bin).output().map_err(|e| Error::Command {
            command: format!("ldd {}", bin.display()),
            detail: format!("{e} (ldd comes with libc-bin)"),
        })?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || text.contains("statically linked") {
            let err = String::from_utf8_lossy(&out.stderr);
            if text.contains("statically linked") || err.contains("not a dynamic executable") {
                continue;
            }
            return Err(Error::Command {
                command: format!("ldd {}", bin.display()),
                detail: err.into_owned(),
            });
        }
        for line in text.lines().map(str::trim) {
            if line.contains("=> not found") {
                return Err(Error::Missing(format!("{}: {line}", bin.display())));
            }
            // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)` or `/lib64/ld-linux-x86-64.so.2 (0x…)`;
            // linux-vdso.so.1 has no path.
            let path = line.split_once("=> ").map_or(line, |(_, p)| p);
            let path = path.split(" (").next().unwrap_or_default();
            if path.starts_with('/') {
                libs.insert(PathBuf::from(path));
            }
        }
    }
    Ok(libs)
}

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

fn blob_path(digest: &str) -> String {
    format!("blobs/{}", digest.replacen(':', "/", 1))
}

fn sha256(bytes: &[u8]) -> String {
    hex_digest(&Sha256::digest(bytes))
}

fn hex_digest(bytes: &[u8]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn sha256_range(f: &mut File, offset: u64, size: u64) -> Result<String, Error> {
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
