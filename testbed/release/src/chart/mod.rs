//! The Helm chart (`manifests/helm/ferrolb`), generated from the kustomize sources in
//! `manifests/` so the two cannot drift: each resource file of the base and of every
//! component becomes a template (the base's always installed, a component's under its
//! value), with [`edits`] for the settings a Helm user expects; `values.yaml`,
//! `values.schema.json` and the README's values table come from one table
//! ([`values`]); CRDs and the dashboard are copied. `ferrolb-testbed chart --write`
//! writes it; `testbed/tests/helm_chart.rs` fails when it is stale and renders it
//! beside `kubectl kustomize`, object for object.

mod edits;
mod text;
mod values;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The chart, relative to the repository.
pub const CHART_DIR: &str = "manifests/helm/ferrolb";
/// The command that writes it.
pub const REGENERATE: &str = "cargo run -p ferrolb-testbed -- chart --write";

/// Why the chart could not be generated.
#[derive(Debug)]
pub enum ChartError {
    /// A source file is not what the generator expects.
    Source(String),
    /// Reading or writing.
    Io(PathBuf, std::io::Error),
}

impl std::fmt::Display for ChartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChartError::Source(s) => write!(f, "cannot generate the chart: {s}"),
            ChartError::Io(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

impl std::error::Error for ChartError {}

/// Where each kustomize source lands in the chart: the first prefix that matches names
/// the condition it is installed under (none: always).
const PLACES: &[(&str, Option<&str>)] = &[
    ("base/bootstrap-rbac.yaml", Some(".Values.bootstrap.rbac")),
    ("base/viewer-rbac.yaml", Some(".Values.viewer.enabled")),
    ("base/", None),
    ("components/l2/", Some(".Values.l2.enabled")),
    // An empty resourceNames would grant every Secret: no passwords, no Role.
    ("components/bgp/", Some("and .Values.bgp.enabled .Values.bgp.passwordSecrets")),
    ("components/monitoring/bootstrap/", Some("and .Values.monitoring.enabled .Values.monitoring.bootstrap")),
    ("components/monitoring/", Some(".Values.monitoring.enabled")),
];

/// The kustomizations the chart is made of, relative to `manifests/`: the base and every
/// component (a new one needs a place in [`PLACES`], or the generator fails).
fn kustomizations(manifests: &Path) -> Result<Vec<String>, ChartError> {
    let mut found = vec!["base".to_owned()];
    let mut stack = vec![manifests.join("components")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).map_err(|err| ChartError::Io(dir.clone(), err))?.flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if e.file_name() == "kustomization.yaml"
                && let Ok(rel) = dir.strip_prefix(manifests)
            {
                found.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    found[1..].sort();
    Ok(found)
}

fn read(path: &Path) -> Result<String, ChartError> {
    std::fs::read_to_string(path).map_err(|e| ChartError::Io(path.to_owned(), e))
}

fn condition(source: &str) -> Result<Option<&'static str>, ChartError> {
    PLACES
        .iter()
        .find(|(prefix, _)| source.starts_with(prefix))
        .map(|(_, c)| *c)
        .ok_or_else(|| ChartError::Source(format!("{source}: no place in the chart for it")))
}

/// A template's file name: the source's path below base/ or components/, dashed.
fn template_name(source: &str) -> String {
    let rest = source.strip_prefix("base/").or_else(|| source.strip_prefix("components/")).unwrap_or(source);
    rest.replace('/', "-")
}

fn wrap(condition: Option<&str>, body: &str) -> String {
    match condition {
        Some(c) => format!("{{{{- if {c} }}}}\n{body}{{{{- end }}}}\n"),
        None => body.to_owned(),
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_owned)).collect()
}

/// Every file of the chart, (path below the chart, content), in a stable order.
pub fn files(repo: &Path) -> Result<BTreeMap<String, String>, ChartError> {
    let manifests = repo.join("manifests");
    let mut out = BTreeMap::new();
    let mut defaults = BTreeMap::new();
    let mut app_version = None;
    let mut patches: Vec<(String, String)> = Vec::new();
    let mut sources = Vec::new();
    for dir in &kustomizations(&manifests)? {
        let dir = dir.as_str();
        let k_path = manifests.join(dir).join("kustomization.yaml");
        let k: Value = serde_saphyr::from_str(&read(&k_path)?)
            .map_err(|e| ChartError::Source(format!("{}: {e}", k_path.display())))?;
        for key in k.as_object().into_iter().flatten().map(|(key, _)| key.as_str()) {
            if !matches!(
                key,
                "apiVersion" | "kind" | "resources" | "patches" | "configMapGenerator" | "images"
            ) {
                return Err(ChartError::Source(format!(
                    "{dir}/kustomization.yaml: the generator does not know `{key}`"
                )));
            }
        }
        for image in k["images"].as_array().into_iter().flatten() {
            if image["name"] != edits::SOURCE_IMAGE || image.get("newName").is_some() {
                return Err(ChartError::Source(format!(
                    "{dir}: images other than a retag of {}",
                    edits::SOURCE_IMAGE
                )));
            }
            app_version = image["newTag"].as_str().map(str::to_owned);
        }
        for resource in strings(&k["resources"]) {
            match (dir, resource.as_str()) {
                ("base", "../crds") => continue,
                // Helm installs into an existing namespace (--create-namespace): see the README.
                ("base", "namespace.yaml") => continue,
                _ => {}
            }
            let source = format!("{dir}/{resource}");
            sources.push(source.clone());
            let mut body = edits::prepare(&read(&manifests.join(&source))?);
            edits::images(&mut body);
            for (value, block) in edits::apply(&source, &mut body)? {
                let v: Value = serde_saphyr::from_str(&block)
                    .map_err(|e| ChartError::Source(format!("{source}: the block of {value}: {e}")))?;
                defaults.insert(value, v);
            }
            out.insert(format!("templates/{}", template_name(&source)), wrap(condition(&source)?, &body));
        }
        for patch in k["patches"].as_array().into_iter().flatten() {
            let path = patch["path"]
                .as_str()
                .ok_or_else(|| ChartError::Source(format!("{dir}: a patch without path")))?;
            patches.push((format!("{dir}/{path}"), read(&manifests.join(dir).join(path))?));
        }
        for generator in k["configMapGenerator"].as_array().into_iter().flatten() {
            let (name, sources, template) = text::config_map(dir, generator, condition(&format!("{dir}/"))?)?;
            for f in sources {
                out.insert(
                    format!("files/{}", f.rsplit('/').next().unwrap_or(&f)),
                    read(&manifests.join(dir).join(&f))?,
                );
            }
            out.insert(format!("templates/{}", template_name(&format!("{dir}/{name}.yaml"))), template);
        }
    }
    let unmatched = edits::unmatched(&sources);
    if !unmatched.is_empty() {
        return Err(ChartError::Source(format!(
            "edits name files the kustomizations do not list: {unmatched:?}"
        )));
    }
    for (source, patch) in patches {
        let target = out
            .iter_mut()
            .find(|(name, body)| name.starts_with("templates/") && targets(body, &patch))
            .map(|(_, body)| body)
            .ok_or_else(|| {
                ChartError::Source(format!("{source}: the object it patches is not in the chart"))
            })?;
        *target = edits::merge_patch(&source, target, &patch, condition(&source)?.unwrap_or("true"))?;
    }
    let app_version = app_version.ok_or_else(|| ChartError::Source("base: no image tag".into()))?;
    for (name, content) in ferrolb_api::crd_files().map_err(|e| ChartError::Source(e.to_string()))? {
        if name != "kustomization.yaml" {
            out.insert(format!("crds/{name}"), content);
        }
    }
    let settings = values::settings();
    out.insert("Chart.yaml".into(), text::chart_yaml(&app_version, &examples(&manifests)?));
    out.insert("values.yaml".into(), text::values_yaml(&settings, &defaults)?);
    out.insert("values.schema.json".into(), text::schema(&settings, &defaults)?);
    out.insert("README.md".into(), text::readme(&settings, &defaults)?);
    out.insert("templates/_helpers.tpl".into(), text::HELPERS.into());
    out.insert("templates/NOTES.txt".into(), text::NOTES.into());
    out.insert(".helmignore".into(), "# Nothing in the chart's directory is left out.\n".into());
    for (name, content) in out.iter_mut() {
        if let Some(header) = text::header(name) {
            content.insert_str(0, &header);
        }
    }
    Ok(out)
}

/// The first object of each ferrolb kind in `manifests/examples/`, for Artifact Hub.
fn examples(manifests: &Path) -> Result<Vec<Value>, ChartError> {
    let dir = manifests.join("examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| ChartError::Io(dir.clone(), e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut by_kind = BTreeMap::new();
    for f in files {
        let text = read(&f)?;
        let docs = ferrolb_api::json_documents(&text)
            .map_err(|e| ChartError::Source(format!("{}: {e}", f.display())))?;
        for o in docs {
            if o["apiVersion"].as_str().is_some_and(|v| v.starts_with("ferrolb.io/"))
                && let Some(kind) = o["kind"].as_str()
            {
                by_kind.entry(kind.to_owned()).or_insert(o);
            }
        }
    }
    Ok(by_kind.into_values().collect())
}

/// Whether the patch's kind and name are those of an object in `body`.
fn targets(body: &str, patch: &str) -> bool {
    let first = |prefix: &str| patch.lines().find(|l| l.starts_with(prefix)).map(str::to_owned);
    match (first("kind: "), first("  name: ")) {
        (Some(kind), Some(name)) => {
            body.split("\n---\n").any(|doc| doc.lines().any(|l| l == kind) && doc.lines().any(|l| l == name))
        }
        _ => false,
    }
}

/// Writes the chart into `repo`, removing generated files it no longer has; returns the
/// files written.
pub fn write(repo: &Path) -> Result<Vec<PathBuf>, ChartError> {
    let dir = repo.join(CHART_DIR);
    let files = files(repo)?;
    for sub in ["templates", "crds", "files"] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else { continue };
        for e in entries.flatten() {
            let name = format!("{sub}/{}", e.file_name().to_string_lossy());
            if !files.contains_key(&name) {
                std::fs::remove_file(e.path()).map_err(|err| ChartError::Io(e.path(), err))?;
            }
        }
    }
    let mut written = Vec::new();
    for (name, content) in files {
        let path = dir.join(&name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| ChartError::Io(parent.to_owned(), e))?;
        }
        std::fs::write(&path, content).map_err(|e| ChartError::Io(path.clone(), e))?;
        written.push(path);
    }
    Ok(written)
}

/// The chart's files that differ from what [`files`] makes, or that it does not make.
pub fn stale(repo: &Path) -> Result<Vec<String>, ChartError> {
    let dir = repo.join(CHART_DIR);
    let files = files(repo)?;
    let mut stale: Vec<String> = files
        .iter()
        .filter(|(name, content)| {
            std::fs::read_to_string(dir.join(name)).ok().as_deref() != Some(content.as_str())
        })
        .map(|(name, _)| name.clone())
        .collect();
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(|err| ChartError::Io(d.clone(), err))?.flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(rel) = path.strip_prefix(&dir) {
                let rel = rel.to_string_lossy().into_owned();
                if !files.contains_key(&rel) {
                    stale.push(rel);
                }
            }
        }
    }
    stale.sort();
    Ok(stale)
}
