//! The ferrolb image without a registry (issue #17 point 1): the OCI archive
//! `ferrolb-testbed image build` writes is a valid image layout holding exactly what the
//! Dockerfile ships (read here from the Dockerfile itself, so the two cannot drift), a
//! check that catches an image lacking a binary, and a real containerd importing and
//! running it, leaving nothing behind.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ferrolb_cluster::containerd::{self, Containerd};
use ferrolb_release::image::{self, Dockerfile, tar::Kind};
use serde_json::{Value, json};

/// The profile of the binaries under test, as in version.rs.
const PROFILE: &str = "debug";

/// What the Dockerfile's final stage declares, read with plain string matching
/// (independent of [`Dockerfile::parse`]).
struct Declared {
    binaries: Vec<String>,
    bin_dir: String,
    user: String,
    entrypoint: Value,
    cmd: Value,
}

fn declared() -> Declared {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Dockerfile")).unwrap();
    let binaries = text
        .lines()
        .find_map(|l| l.strip_prefix("ARG BINARIES="))
        .expect("Dockerfile: ARG BINARIES=")
        .trim_matches('"')
        .split_whitespace()
        .map(String::from)
        .collect();
    let last_stage = &text[text.rfind("\nFROM ").expect("Dockerfile: FROM")..];
    let last =
        |instr: &str| last_stage.lines().filter_map(|l| l.strip_prefix(instr)).next_back().map(str::trim);
    let exec_form = |v: Option<&str>| v.map_or(Value::Null, |v| serde_json::from_str(v).unwrap());
    Declared {
        binaries,
        bin_dir: last("COPY --from=build /out/ ").expect("Dockerfile: COPY --from=build /out/").to_owned(),
        user: last("USER ").expect("Dockerfile: USER").to_owned(),
        entrypoint: exec_form(last("ENTRYPOINT ")),
        cmd: exec_form(last("CMD ")),
    }
}

/// A file removed when the test ends, however it ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(what: &str) -> Self {
        let p = std::env::temp_dir().join(format!("ferrolb-image-{}-{what}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        let _ = std::fs::remove_dir_all(&p);
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The image of the workspace's binaries, minus `leave_out`.
fn build(what: &str, leave_out: Option<&str>) -> (Scratch, image::Built) {
    let dockerfile = Dockerfile::workspace().unwrap();
    let mut binaries = image::workspace_binaries(&dockerfile, PROFILE).unwrap();
    binaries.retain(|(name, _)| Some(name.as_str()) != leave_out);
    let out = Scratch::new(&format!("{what}.tar"));
    let built = image::build(&dockerfile, &binaries, image::DEFAULT_NAME, &out.0).unwrap();
    (out, built)
}

#[test]
fn archive_is_an_oci_layout_of_the_dockerfiles_image() {
    let declared = declared();
    let (out, built) = build("layout", None);
    // index.json → manifest → config and layer, digests, sizes and diff_id.
    let img = image::inspect(&out.0).unwrap();
    assert_eq!(img.name, image::DEFAULT_NAME);
    assert_eq!((img.archive_bytes, img.layer_bytes), (built.archive_bytes, built.layer_bytes));
    let config = &img.config["config"];
    assert_eq!(config["User"], declared.user.as_str(), "USER");
    assert_eq!(config["Entrypoint"], declared.entrypoint, "ENTRYPOINT");
    assert_eq!(config["Cmd"], declared.cmd, "CMD");
    // Two tags are two images (an upgrade changes the image ID), sharing one layer.
    let tag = image::DEFAULT_NAME.rsplit_once(':').unwrap().1;
    assert_eq!(config["Labels"][image::VERSION_LABEL], tag, "the version label");

    let bin_dir = declared.bin_dir.trim_matches('/');
    let dockerfile = Dockerfile::workspace().unwrap();
    for bin in &declared.binaries {
        let e = img
            .layer
            .iter()
            .find(|e| e.path == format!("{bin_dir}/{bin}"))
            .unwrap_or_else(|| panic!("the layer has no /{bin_dir}/{bin}"));
        let host = ferrolb_lab::binary::workspace(bin, PROFILE).unwrap();
        assert_eq!(e.kind, Kind::File, "{bin}");
        assert!(e.mode & 0o111 == 0o111, "{bin} is not executable: {:o}", e.mode);
        assert_eq!(e.size, std::fs::metadata(host).unwrap().len(), "{bin}: not the workspace's binary");
    }
    // Nothing they do not need: the binaries, the base's /etc files, the shared libraries.
    let files: Vec<&str> =
        img.layer.iter().filter(|e| e.kind == Kind::File).map(|e| e.path.as_str()).collect();
    let unexpected: Vec<&&str> = files
        .iter()
        .filter(|p| {
            !(p.strip_prefix(bin_dir).is_some_and(|b| declared.binaries.iter().any(|d| b == format!("/{d}")))
                || p.starts_with("etc/")
                || p.contains(".so"))
        })
        .collect();
    assert!(unexpected.is_empty(), "files the binaries do not need: {unexpected:?}");
    let passwd = image::layer_file(&out.0, &img, "etc/passwd").unwrap();
    let uid = declared.user.split(':').next().unwrap();
    assert!(passwd.lines().any(|l| l.split(':').nth(2) == Some(uid)), "/etc/passwd lacks {uid}: {passwd}");
    image::check(&out.0, &dockerfile).unwrap();
    println!("image: archive {} bytes, layer {} bytes", built.archive_bytes, built.layer_bytes);
}

#[test]
fn check_fails_on_an_image_without_one_of_the_binaries() {
    let dockerfile = Dockerfile::workspace().unwrap();
    for left_out in &dockerfile.binaries {
        let (out, _) = build(&format!("without-{left_out}"), Some(left_out));
        let err =
            image::check(&out.0, &dockerfile).expect_err(&format!("an image without {left_out} passed"));
        assert!(
            err.to_string().contains(&format!("{}/{left_out} is missing", dockerfile.bin_dir)),
            "{left_out}: {err}"
        );
    }
}

#[test]
fn check_fails_on_another_user_or_a_corrupt_blob() {
    let dockerfile = Dockerfile::workspace().unwrap();
    let (out, _) = build("mutations", None);
    let root = Dockerfile { user: Some("0:0".into()), ..dockerfile.clone() };
    let err = image::check(&out.0, &root).expect_err("USER 0:0 passed");
    assert!(err.to_string().contains("User is"), "{err}");

    // One byte of a binary changed: the layer no longer has its digest.
    let img = image::inspect(&out.0).unwrap();
    let bin = img.layer.iter().find(|e| e.path.ends_with(&dockerfile.binaries[0])).unwrap();
    let layer = ferrolb_release::image::tar::entries(&mut std::fs::File::open(&out.0).unwrap(), 0, None)
        .unwrap()
        .into_iter()
        .max_by_key(|e| e.size)
        .unwrap();
    let at = layer.offset + bin.offset + bin.size / 2;
    let mut bytes = std::fs::read(&out.0).unwrap();
    bytes[usize::try_from(at).unwrap()] ^= 0xff;
    std::fs::write(&out.0, bytes).unwrap();
    let err = image::inspect(&out.0).expect_err("a corrupt layer passed");
    assert!(err.to_string().contains("hashes to"), "{err}");
}

#[test]
fn containerd_imports_and_runs_the_image_and_leaves_nothing_behind() {
    let declared = declared();
    let (out, built) = build("containerd", None);
    let dir = Scratch::new("containerd");
    let (socket, cgroup) = {
        let ctd = Containerd::start(&dir.0).unwrap();
        ctd.import(&out.0).unwrap();
        let listed = ctd.ctr_ok(&["images", "ls", "--quiet"]).unwrap();
        assert_eq!(String::from_utf8_lossy(&listed.stdout).trim(), built.name);
        for bin in &declared.binaries {
            let path = format!("{}/{bin}", declared.bin_dir);
            let run = ctd.run(&built.name, bin, &[&path, "--version"]).unwrap();
            let stdout = String::from_utf8_lossy(&run.stdout);
            assert!(
                run.status.success() && stdout.starts_with(&format!("{bin} {} (", env!("CARGO_PKG_VERSION"))),
                "{bin} --version in the container: {run:?}\n{}",
                ctd.log()
            );
        }
        // What containerd makes of the image's config: the user and the entrypoint.
        ctd.ctr_ok(&["containers", "create", &built.name, "spec"]).unwrap();
        let info = ctd.ctr_ok(&["containers", "info", "spec"]).unwrap();
        let info: Value = serde_json::from_slice(&info.stdout).unwrap();
        let process = &info["Spec"]["process"];
        let (uid, gid) = declared.user.split_once(':').unwrap();
        assert_eq!(process["user"]["uid"], json!(uid.parse::<u32>().unwrap()));
        assert_eq!(process["user"]["gid"], json!(gid.parse::<u32>().unwrap()));
        assert_eq!(process["args"], declared.entrypoint);
        ctd.ctr_ok(&["containers", "delete", "spec"]).unwrap();
        // The entrypoint runs: the controller, as that user (its home comes from /etc/passwd).
        let run = ctd.run(&built.name, "entrypoint", &[]).unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(
            stderr.contains("ferrolb-controller: no Kubernetes configuration")
                && stderr.contains("/home/nonroot"),
            "the entrypoint without a cluster: {run:?}"
        );
        (ctd.socket().to_string_lossy().into_owned(), ctd.cgroup().to_owned())
    };
    // Dropped: no process, mount, cgroup or file of it is left.
    assert!(containerd::processes_naming(&socket).is_empty(), "processes left naming {socket}");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let prefix = dir.0.to_string_lossy();
    assert!(!mountinfo.contains(prefix.as_ref()), "mounts left under {prefix}");
    let cgroups: BTreeSet<PathBuf> = std::fs::read_dir("/sys/fs/cgroup")
        .unwrap()
        .map(|h| h.unwrap().path().join(&cgroup))
        .filter(|p| p.exists())
        .collect();
    assert!(cgroups.is_empty(), "cgroups left: {cgroups:?}");
    assert!(!dir.0.exists(), "{} left", dir.0.display());
}
