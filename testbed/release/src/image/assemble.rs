//! The ferrolb image assembled from the workspace's binaries the way the Dockerfile's
//! final stage assembles the published one, on its base rebuilt from the host (users,
//! directories, environment, CA certificates, the shared libraries the binaries load).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use super::VERSION_LABEL;
use super::dockerfile::Dockerfile;
use super::layout::{Built, tag_of, write_image};
use ferrolb_lab::Error;

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

/// The workspace's binaries the Dockerfile ships, built for `profile` (see
/// [`ferrolb_lab::binary::workspace`]).
pub fn workspace_binaries(dockerfile: &Dockerfile, profile: &str) -> Result<Vec<(String, PathBuf)>, Error> {
    dockerfile
        .binaries
        .iter()
        .map(|name| Ok((name.clone(), ferrolb_lab::binary::workspace(name, profile)?)))
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
            "the Dockerfile's base {} is not one testbed/release/src/image/assemble.rs knows how to assemble; \
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
