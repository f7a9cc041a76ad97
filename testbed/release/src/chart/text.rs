//! The chart's own files: Chart.yaml, values.yaml, values.schema.json, the README, the
//! helpers, and the ConfigMaps of kustomize's configMapGenerator.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::values::{SECTIONS, Setting};
use super::{ChartError, REGENERATE, edits};

/// The header of a generated file, in its own comment syntax (none where the content
/// is copied byte for byte or has no comments).
pub(super) fn header(name: &str) -> Option<String> {
    let line = format!("Generated from manifests/ by `{REGENERATE}`; do not edit.");
    if name.starts_with("crds/")
        || name.starts_with("files/")
        || name.ends_with(".json")
        || name.ends_with(".txt")
    {
        None
    } else if name.ends_with(".tpl") {
        Some(format!("{{{{/* {line} */}}}}\n"))
    } else if name.ends_with(".md") {
        Some(format!("<!-- {line} -->\n"))
    } else {
        Some(format!("# {line}\n"))
    }
}

/// The image helper every template names.
pub(super) const HELPERS: &str = r#"{{/* The image of every container: image.repository, and image.tag or the chart's appVersion. */}}
{{- define "ferrolb.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
"#;

/// What `helm install` prints.
pub(super) const NOTES: &str = r#"ferrolb {{ .Chart.AppVersion }} is installed in {{ .Release.Namespace }} ({{ include "ferrolb.image" . }}).
{{- if eq .Values.image.repository "example.invalid/ferrolb" }}

WARNING: image.repository is the placeholder example.invalid/ferrolb, which no registry
serves: no ferrolb pod will start. No image is published yet; build one from the
repository's Dockerfile, push it, and run
  helm upgrade {{ .Release.Name }} CHART --reuse-values --set image.repository=REGISTRY/ferrolb
{{- end }}

Next: give it addresses and say how to announce them, e.g. (from the repository)
  kubectl apply -f manifests/examples/l2.yaml     # ARP / NDP on the nodes' segment
  kubectl apply -f manifests/examples/bgp.yaml    # BGP to your routers
then create a Service of type LoadBalancer, and look with `kubectl ferrolb status`.
{{- if not .Values.l2.enabled }}

L2 is off (l2.enabled=false): L2Advertisements will not be served.
{{- end }}

`helm uninstall` keeps the CRDs and your ferrolb objects; see the chart's README.
"#;

/// A ConfigMap of a kustomize `configMapGenerator` entry (no name suffix): its name,
/// the files it holds (relative to its kustomization) and its template.
pub(super) fn config_map(
    dir: &str,
    generator: &Value,
    condition: Option<&str>,
) -> Result<(String, Vec<String>, String), ChartError> {
    let bad = |why: &str| ChartError::Source(format!("{dir}: configMapGenerator {why}"));
    for (key, _) in generator.as_object().into_iter().flatten() {
        if !matches!(key.as_str(), "name" | "namespace" | "files" | "options") {
            return Err(bad(&format!("has `{key}`, which the generator does not know")));
        }
    }
    if generator["options"]["disableNameSuffixHash"] != true {
        return Err(bad("without disableNameSuffixHash: the chart cannot compute kustomize's hash"));
    }
    let name = generator["name"].as_str().ok_or_else(|| bad("without a name"))?;
    let namespace = match generator["namespace"].as_str() {
        Some(edits::SOURCE_NAMESPACE) | None => "{{ .Release.Namespace }}".to_owned(),
        Some(other) => other.to_owned(),
    };
    let mut t =
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\n");
    if let Some(labels) = generator["options"]["labels"].as_object() {
        t.push_str("  labels:\n");
        for (k, v) in labels {
            t.push_str(&format!("    {k}: {v}\n"));
        }
    }
    t.push_str("data:\n");
    let files: Vec<String> = super::strings(&generator["files"]);
    for f in &files {
        if f.contains('=') {
            return Err(bad("with `key=path` files"));
        }
        let base = f.rsplit('/').next().unwrap_or(f);
        t.push_str(&format!("  {base}: {{{{ .Files.Get \"files/{base}\" | toJson }}}}\n"));
    }
    Ok((name.to_owned(), files, super::wrap(condition, &t)))
}

/// Chart.yaml, with Artifact Hub's annotations (`examples`: one object of each kind).
pub(super) fn chart_yaml(app_version: &str, examples: &[Value]) -> String {
    let version = env!("CARGO_PKG_VERSION");
    let mut crds = String::new();
    for crd in ferrolb_api::crd::crds() {
        let n = &crd.spec.names;
        let stored = crd.spec.versions.iter().find(|v| v.storage);
        let description = stored
            .and_then(|v| v.schema.as_ref()?.open_api_v3_schema.as_ref()?.description.clone())
            .unwrap_or_else(|| format!("ferrolb {}", n.kind));
        crds.push_str(&format!(
            "    - kind: {}\n      version: {}\n      name: {}\n      displayName: {}\n      description: {}\n",
            n.kind,
            stored.map(|v| v.name.as_str()).unwrap_or_default(),
            crd.metadata.name.clone().unwrap_or_default(),
            n.kind,
            Value::from(description.split_whitespace().collect::<Vec<_>>().join(" "))
        ));
    }
    let examples: String = examples.iter().map(|e| format!("    - {e}\n")).collect();
    format!(
        "apiVersion: v2\n\
         name: ferrolb\n\
         description: Load balancer for bare-metal Kubernetes - Service addresses announced by BGP or ARP/NDP\n\
         type: application\n\
         version: {version}\n\
         appVersion: \"{app_version}\"\n\
         kubeVersion: \">=1.30.0-0\"\n\
         home: https://example.invalid/ferrolb\n\
         sources:\n- https://example.invalid/ferrolb\n\
         keywords: [load-balancer, bare-metal, bgp, arp, ndp, loadbalancer]\n\
         annotations:\n  \
           artifacthub.io/license: Apache-2.0\n  \
           artifacthub.io/category: networking\n  \
           artifacthub.io/operator: \"false\"\n  \
           artifacthub.io/prerelease: \"{prerelease}\"\n  \
           artifacthub.io/containsSecurityUpdates: \"false\"\n  \
           artifacthub.io/images: |\n    - name: ferrolb\n      image: {image}:{app_version}\n  \
           artifacthub.io/crds: |\n{crds}  \
           artifacthub.io/crdsExamples: |\n{examples}  \
           artifacthub.io/links: |\n    - name: source\n      url: https://example.invalid/ferrolb\n",
        prerelease = version.starts_with("0."),
        image = edits::SOURCE_IMAGE,
    )
}

fn default_of(s: &Setting, lifted: &BTreeMap<&str, Value>) -> Result<Value, ChartError> {
    s.default
        .clone()
        .or_else(|| lifted.get(s.path).cloned())
        .ok_or_else(|| ChartError::Source(format!("no default for {}", s.path)))
}

fn wrap_words(text: &str, indent: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent.len() + 2 + line.len() + 1 + word.len() > width {
            out.push_str(&format!("{indent}# {line}\n"));
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out.push_str(&format!("{indent}# {line}\n"));
    }
    out
}

/// `key: value` at `indent`: scalars and empty or scalar lists inline, the rest as a block.
fn yaml_entry(key: &str, v: &Value, indent: &str) -> Result<String, ChartError> {
    let flat = match v {
        Value::Array(a) => a.iter().all(|x| !x.is_object() && !x.is_array()),
        Value::Object(o) => o.is_empty(),
        _ => true,
    };
    if flat {
        return Ok(format!("{indent}{key}: {v}\n"));
    }
    let block = serde_saphyr::to_string(v).map_err(|e| ChartError::Source(format!("{key}: {e}")))?;
    let mut out = format!("{indent}{key}:\n");
    for l in block.lines() {
        out.push_str(&format!("{indent}  {l}\n"));
    }
    Ok(out)
}

/// values.yaml: every setting with its default and what it does.
pub(super) fn values_yaml(
    settings: &[Setting],
    lifted: &BTreeMap<&str, Value>,
) -> Result<String, ChartError> {
    let mut out =
        String::from("# The chart installs what manifests/overlays/l2-bgp installs with these defaults.\n");
    let mut section = "";
    for s in settings {
        let v = default_of(s, lifted)?;
        match s.path.split_once('.') {
            Some((sec, key)) => {
                if sec != section {
                    section = sec;
                    let help = SECTIONS.iter().find(|x| x.key == sec).map_or("", |x| x.help);
                    out.push_str(&format!("\n{}{sec}:\n", wrap_words(help, "", 88)));
                }
                out.push_str(&wrap_words(s.help, "  ", 88));
                out.push_str(&yaml_entry(key, &v, "  ")?);
            }
            None => {
                section = "";
                out.push_str(&format!("\n{}", wrap_words(s.help, "", 88)));
                out.push_str(&yaml_entry(s.path, &v, "")?);
            }
        }
    }
    Ok(out)
}

/// values.schema.json: every setting's schema, no other key anywhere.
pub(super) fn schema(settings: &[Setting], lifted: &BTreeMap<&str, Value>) -> Result<String, ChartError> {
    let mut root = json!({
        "$schema": "https://json-schema.org/draft-07/schema#",
        "title": "ferrolb chart values",
        "type": "object",
        "additionalProperties": false,
        "properties": {},
    });
    for s in settings {
        let mut leaf = s.schema.clone();
        leaf["description"] = json!(s.help.split_whitespace().collect::<Vec<_>>().join(" "));
        leaf["default"] = default_of(s, lifted)?;
        let parts: Vec<&str> = s.path.split('.').collect();
        let mut at = &mut root;
        for (i, part) in parts.iter().enumerate() {
            let props = at["properties"].as_object_mut().ok_or_else(|| ChartError::Source(s.path.into()))?;
            if i + 1 == parts.len() {
                props.insert((*part).into(), leaf.clone());
                break;
            }
            let help = SECTIONS.iter().find(|x| x.key == *part).map_or("", |x| x.help);
            at = props.entry(*part).or_insert_with(|| {
                json!({"type": "object", "additionalProperties": false, "description": help, "properties": Map::new()})
            });
        }
    }
    serde_json::to_string_pretty(&root).map(|s| s + "\n").map_err(|e| ChartError::Source(e.to_string()))
}

/// The chart's README: how to install it, and the values table.
pub(super) fn readme(settings: &[Setting], lifted: &BTreeMap<&str, Value>) -> Result<String, ChartError> {
    let mut table = String::from("| Key | Type | Default | Description |\n| --- | --- | --- | --- |\n");
    for s in settings {
        let kind = match &s.schema["type"] {
            Value::String(t) => t.clone(),
            _ if s.schema.get("enum").is_some() => "string".into(),
            other => other.to_string(),
        };
        let default = serde_json::to_string(&default_of(s, lifted)?).unwrap_or_default();
        let help = s.help.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|");
        table.push_str(&format!("| `{}` | {kind} | `{default}` | {help} |\n", s.path));
    }
    Ok(format!(
        "# ferrolb Helm chart\n\n\
         Installs ferrolb — the controller, a speaker on every node, the speakers' own-node admission policy, \
         the read-only roles of ferrolb-bootstrap and ferrolb-viewer, and optionally the Prometheus Operator \
         objects — exactly as `kubectl apply -k manifests/overlays/l2-bgp` does: the templates are generated \
         from those kustomize sources, and a test renders both and compares every object.\n\n\
         ```sh\n\
         helm install ferrolb manifests/helm/ferrolb --namespace ferrolb-system --create-namespace \\\n  \
         --set image.repository=REGISTRY/ferrolb --set image.tag=TAG\n\
         ```\n\n\
         * **Namespace.** The speaker is hostNetwork with NET_ADMIN and NET_RAW, which only the `privileged` Pod \
         Security level admits. Where your cluster enforces a stricter level by default, label the namespace \
         before installing: `kubectl label namespace ferrolb-system pod-security.kubernetes.io/enforce=privileged` \
         (the kustomize base creates it so labelled; Helm creates namespaces bare).\n\
         * **One release per cluster.** The ClusterRoles, the admission policy and the CRDs are cluster-wide.\n\
         * **CRDs** are in `crds/`: Helm installs them with the chart but never upgrades or deletes them. After \
         upgrading the chart, apply the new ones: `kubectl apply --server-side --force-conflicts -f \
         manifests/helm/ferrolb/crds/` (Helm created them, so the apply must take their fields over).\n\
         * **Upgrades.** `helm upgrade ferrolb manifests/helm/ferrolb --reuse-values --set image.tag=NEW` rolls \
         the speakers one node at a time; each hands its addresses over before it stops.\n\
         * **Uninstall.** `helm uninstall ferrolb -n ferrolb-system` removes everything the chart installed but \
         the CRDs (and the namespace, which `--create-namespace` made outside the release), so your pools, \
         peers and advertisements stay. To remove those too: \
         `kubectl delete -f manifests/helm/ferrolb/crds/` (this deletes every ferrolb object).\n\
         * **Bad values are refused** by `values.schema.json` before anything is applied, naming the value.\n\
         * **Moving from kustomize.** Helm will not take over objects it did not create. Mark what \
         `kubectl apply -k` installed as the release's (give `helm template` the values you will install \
         with), then install:\n\n\
         ```sh\n\
         helm template ferrolb manifests/helm/ferrolb -n ferrolb-system | kubectl annotate --overwrite -f - \\\n  \
         meta.helm.sh/release-name=ferrolb meta.helm.sh/release-namespace=ferrolb-system\n\
         helm template ferrolb manifests/helm/ferrolb -n ferrolb-system | kubectl label --overwrite -f - \\\n  \
         app.kubernetes.io/managed-by=Helm\n\
         ```\n\n\
         ## Values\n\n{table}"
    ))
}
