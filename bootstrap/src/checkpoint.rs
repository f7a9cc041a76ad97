//! The checkpoint: one ControlPlaneVIP and the BGPPeers / BFDProfiles it refers to,
//! read at start with a fallback to `FILE.prev`, and rewritten atomically on refresh.

use std::path::{Path, PathBuf};

use ferrolb_api::{Config, ControlPlaneVip, ObjectStream, StreamError, ValidConfig, read_stream};
use kube::ResourceExt;

/// A checkpoint that passed validation.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    /// The validated objects (exactly one ControlPlaneVIP).
    pub config: ValidConfig,
    /// The file it was read from (`FILE` or `FILE.prev`).
    pub path: PathBuf,
    /// Lines to log: ignored documents, and why `FILE` was skipped for `FILE.prev`.
    pub warnings: Vec<String>,
}

impl Checkpoint {
    /// The ControlPlaneVIP of the checkpoint.
    pub fn vip(&self) -> &ControlPlaneVip {
        // `load` only builds checkpoints holding exactly one.
        &self.config.control_plane_vips[0]
    }
}

/// Why no checkpoint could be used; `Display` is one line naming file, document and field.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CheckpointError(pub String);

/// `FILE.prev`, where [`write`] keeps the replaced checkpoint.
pub fn prev_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(".prev");
    PathBuf::from(s)
}

/// Reads `path`; if it is missing, corrupt or invalid, reads `path.prev` instead; fails
/// with one line about `path` (and why `path.prev` did not help) when neither is usable.
pub fn load(path: &Path) -> Result<Checkpoint, CheckpointError> {
    let first = match load_one(path) {
        Ok(c) => return Ok(c),
        Err(e) => e,
    };
    let prev = prev_path(path);
    match load_one(&prev) {
        Ok(mut c) => {
            c.warnings.push(format!("using the previous checkpoint {}: {first}", prev.display()));
            Ok(c)
        }
        Err(second) => {
            let why_prev = if prev.exists() { second } else { format!("{} does not exist", prev.display()) };
            Err(CheckpointError(format!(
                "no usable checkpoint: {first} (fallback: {why_prev}); fix the file or run `ferrolb-bootstrap checkpoint init`"
            )))
        }
    }
}

/// Replaces the checkpoint `path` with `text` atomically. The file being replaced becomes
/// `FILE.prev` only if it is itself a usable checkpoint: `FILE.prev` is the fallback when
/// `FILE` is corrupt, so a torn or hand-mangled `FILE` must never push out a good one.
pub fn write(path: &Path, text: &str) -> Result<(), StreamError> {
    let keep_previous = load_one(path).is_ok();
    ferrolb_api::write_atomically(path, text.as_bytes(), keep_previous)
}

/// One file: parsed, validated, exactly one ControlPlaneVIP. Errors are one line.
pub fn load_one(path: &Path) -> Result<Checkpoint, String> {
    let file = path.display().to_string();
    let stream = read_stream(path).map_err(|e| one_line(&e))?;
    from_stream(&file, stream).map(|(config, warnings)| Checkpoint {
        config,
        path: path.to_owned(),
        warnings,
    })
}

/// Validates a parsed stream as a checkpoint.
pub fn from_stream(file: &str, stream: ObjectStream) -> Result<(ValidConfig, Vec<String>), String> {
    let config = stream.validated_config(file).map_err(|e| one_line(&e))?;
    match config.control_plane_vips.len() {
        1 => {}
        0 => return Err(format!("{file}: holds no ControlPlaneVIP; a checkpoint holds exactly one")),
        n => {
            let names: Vec<String> = config.control_plane_vips.iter().map(|v| v.name_any()).collect();
            return Err(format!(
                "{file}: holds {n} ControlPlaneVIPs ({}); a checkpoint holds exactly one",
                names.join(", ")
            ));
        }
    }
    Ok((config, stream.warnings))
}

/// A stream error on one line: multi-error validation results joined with `; `.
pub fn one_line(e: &StreamError) -> String {
    match e {
        StreamError::Invalid { file, errors } => {
            let parts: Vec<String> = errors
                .iter()
                .map(|(src, err)| match src {
                    Some(s) => format!("{s}: {err}"),
                    None => err.to_string(),
                })
                .collect();
            format!("{file}: invalid configuration: {}", parts.join("; "))
        }
        other => other.to_string().replace('\n', " "),
    }
}

/// The checkpoint subset of `config` for the VIP `name`, ready to write.
pub fn render(config: &Config, name: &str) -> Result<String, String> {
    let subset =
        config.for_control_plane_vip(name).ok_or_else(|| format!("ControlPlaneVIP {name:?} not found"))?;
    let mut objects = subset.to_objects();
    for o in &mut objects {
        strip_server_fields(o);
    }
    ferrolb_api::write_stream(&objects).map_err(|e| e.to_string())
}

/// Keeps only names and specs: drops what the apiserver adds (resourceVersion, uid,
/// managedFields, status) and labels and annotations, which configure nothing here —
/// `kubectl apply` adds `kubectl.kubernetes.io/last-applied-configuration` to every object
/// it applies, and that must not count as a configuration change (a rewrite restarts the
/// announcement). So a checkpoint only changes when the configuration does.
fn strip_server_fields(o: &mut ferrolb_api::Object) {
    use ferrolb_api::Object;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    fn clean(m: &mut ObjectMeta) {
        *m = ObjectMeta { name: m.name.take(), namespace: m.namespace.take(), ..Default::default() };
    }
    match o {
        Object::ControlPlaneVip(x) => {
            clean(&mut x.metadata);
            x.status = None;
        }
        Object::BgpPeer(x) => {
            clean(&mut x.metadata);
            x.status = None;
        }
        Object::BfdProfile(x) => {
            clean(&mut x.metadata);
            x.status = None;
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const GOOD: &str = "apiVersion: ferrolb.io/v1alpha1
kind: ControlPlaneVIP
metadata: {name: apiserver}
spec:
  address: 192.0.2.200
  mode: L2
  members: [{name: node1, address: 192.0.2.11}]
";

    const BAD_FIELD: &str = "apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {name: router}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1}
---
apiVersion: ferrolb.io/v1alpha1
kind: ControlPlaneVIP
metadata: {name: apiserver}
spec:
  address: 192.0.2.200
  mode: L2
  members: [{name: node1, address: 192.0.2.11}]
  healthCheck: {failureThreshold: 0}
";

    #[test]
    fn a_valid_checkpoint_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.yaml");
        std::fs::write(&path, GOOD).unwrap();
        let c = load(&path).unwrap();
        assert_eq!(c.path, path);
        assert_eq!(c.vip().spec.address, "192.0.2.200");
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn a_corrupt_checkpoint_falls_back_to_prev() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.yaml");
        std::fs::write(&path, "kind: [unterminated").unwrap();
        std::fs::write(prev_path(&path), GOOD).unwrap();
        let c = load(&path).unwrap();
        assert_eq!(c.path, prev_path(&path));
        assert_eq!(c.vip().spec.address, "192.0.2.200");
        assert!(
            c.warnings.iter().any(|w| w.contains("cp.yaml") && w.contains("invalid YAML")),
            "{:?}",
            c.warnings
        );
    }

    #[test]
    fn an_invalid_checkpoint_falls_back_to_prev() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.yaml");
        std::fs::write(&path, BAD_FIELD).unwrap();
        std::fs::write(prev_path(&path), GOOD).unwrap();
        assert_eq!(load(&path).unwrap().path, prev_path(&path));
    }

    #[test]
    fn only_a_usable_checkpoint_becomes_prev() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.yaml");
        let other = GOOD.replace("192.0.2.200", "192.0.2.201");
        write(&path, GOOD).unwrap();
        assert!(!prev_path(&path).exists(), "nothing was replaced");
        write(&path, &other).unwrap();
        assert_eq!(std::fs::read_to_string(prev_path(&path)).unwrap(), GOOD);
        for bad in ["kind: [unterminated", BAD_FIELD] {
            std::fs::write(&path, bad).unwrap();
            write(&path, &other).unwrap();
            assert_eq!(std::fs::read_to_string(prev_path(&path)).unwrap(), GOOD, "replaced by:\n{bad}");
            assert_eq!(load(&path).unwrap().vip().spec.address, "192.0.2.201");
        }
    }

    #[test]
    fn invalid_without_prev_is_one_line_naming_file_document_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.yaml");
        std::fs::write(&path, BAD_FIELD).unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(!e.contains('\n'), "{e}");
        assert!(e.contains(&path.display().to_string()), "{e}");
        assert!(e.contains("document 2"), "{e}");
        assert!(e.contains("spec.healthCheck.failureThreshold"), "{e}");
        assert!(e.contains("cp.yaml.prev does not exist"), "{e}");
    }

    #[test]
    fn both_invalid_names_both_problems() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.yaml");
        std::fs::write(&path, BAD_FIELD).unwrap();
        std::fs::write(prev_path(&path), "apiVersion: ferrolb.io/v1alpha1\nkind: BGPPeer\nmetadata: {name: x}\nspec: {myASN: 1, peerASN: 2, peerAddress: 192.0.2.1, typo: 1}\n").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(!e.contains('\n'), "{e}");
        assert!(e.contains("failureThreshold") && e.contains("spec.typo"), "{e}");
    }

    #[test]
    fn a_checkpoint_needs_exactly_one_vip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cp.yaml");
        std::fs::write(&path, "apiVersion: ferrolb.io/v1alpha1\nkind: BGPPeer\nmetadata: {name: r}\nspec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1}\n").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("holds no ControlPlaneVIP"), "{e}");
    }

    #[test]
    fn render_round_trips_without_server_fields() {
        let stream = ferrolb_api::parse_stream("x", GOOD).unwrap();
        let mut config = stream.config();
        config.control_plane_vips[0].metadata.resource_version = Some("42".into());
        let text = render(&config, "apiserver").unwrap();
        assert!(!text.contains("42"), "{text}");
        let back = from_stream("x", ferrolb_api::parse_stream("x", &text).unwrap()).unwrap().0;
        assert_eq!(back.control_plane_vips[0].spec, config.control_plane_vips[0].spec);
    }

    #[test]
    fn labels_and_annotations_are_not_configuration() {
        let config = ferrolb_api::parse_stream("x", GOOD).unwrap().config();
        let plain = render(&config, "apiserver").unwrap();
        let mut applied = config.clone();
        // What `kubectl apply` and other clients leave on the objects a refresh reads.
        let last_applied = "kubectl.kubernetes.io/last-applied-configuration".to_string();
        for m in applied
            .control_plane_vips
            .iter_mut()
            .map(|v| &mut v.metadata)
            .chain(applied.peers.iter_mut().map(|p| &mut p.metadata))
        {
            m.annotations = Some([(last_applied.clone(), "{\"kind\":\"x\"}".to_string())].into());
            m.labels = Some([("team".to_string(), "infra".to_string())].into());
            m.finalizers = Some(vec!["example.com/keep".into()]);
        }
        assert_eq!(render(&applied, "apiserver").unwrap(), plain);
        let back = from_stream("x", ferrolb_api::parse_stream("x", &plain).unwrap()).unwrap().0;
        let want = from_stream("x", ferrolb_api::parse_stream("x", GOOD).unwrap()).unwrap().0;
        assert_eq!(*back, *want, "names and specs survive");
    }
}
