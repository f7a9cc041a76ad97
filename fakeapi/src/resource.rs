//! The resource types the fake apiserver serves: built-ins and registered CRDs.

use std::collections::BTreeMap;

use serde_json::Value;

/// One served resource type, as discovery would describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceInfo {
    /// API group; empty for the core group.
    pub group: String,
    /// Served versions; objects are stored once and shown at the requested version.
    pub versions: Vec<String>,
    /// Lower-case plural used in REST paths.
    pub plural: String,
    /// Kind, e.g. `Service`.
    pub kind: String,
    /// Namespaced (true) or cluster-scoped (false).
    pub namespaced: bool,
    /// Whether a `/status` subresource exists (main writes then ignore `.status`).
    pub status_subresource: bool,
    /// Whether objects carry `metadata.generation` (as Pods, EndpointSlices, CRDs and custom
    /// resources do; Services, ConfigMaps, Nodes, Leases … have none on a real server).
    pub generation: bool,
}

impl ResourceInfo {
    fn builtin(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool, status: bool) -> Self {
        ResourceInfo {
            group: group.into(),
            versions: vec![version.into()],
            plural: plural.into(),
            kind: kind.into(),
            namespaced,
            status_subresource: status,
            generation: false,
        }
    }

    fn with_generation(self) -> Self {
        ResourceInfo { generation: true, ..self }
    }

    /// `apiVersion` string for a version of this resource.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() { version.to_string() } else { format!("{}/{}", self.group, version) }
    }

    /// Reads the served resources out of a `CustomResourceDefinition` JSON object.
    pub fn from_crd(crd: &Value) -> Option<Self> {
        let spec = crd.get("spec")?;
        let names = spec.get("names")?;
        let versions: Vec<&Value> = spec
            .get("versions")?
            .as_array()?
            .iter()
            .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true))
            .collect();
        Some(ResourceInfo {
            group: spec.get("group")?.as_str()?.to_string(),
            versions: versions.iter().filter_map(|v| Some(v.get("name")?.as_str()?.to_string())).collect(),
            plural: names.get("plural")?.as_str()?.to_string(),
            kind: names.get("kind")?.as_str()?.to_string(),
            namespaced: spec.get("scope").and_then(Value::as_str) == Some("Namespaced"),
            // Real CRDs declare subresources per version; any version with status enables it here.
            status_subresource: versions.iter().any(|v| v.pointer("/subresources/status").is_some()),
            generation: true,
        })
    }
}

/// Resource types keyed by `(group, plural)`.
#[derive(Debug, Clone)]
pub(crate) struct Registry {
    by_group_plural: BTreeMap<(String, String), ResourceInfo>,
}

impl Registry {
    /// The built-in kinds ferrolb touches.
    pub(crate) fn builtins() -> Self {
        let mut r = Registry { by_group_plural: BTreeMap::new() };
        for info in [
            ResourceInfo::builtin("", "v1", "namespaces", "Namespace", false, true),
            ResourceInfo::builtin("", "v1", "nodes", "Node", false, true),
            ResourceInfo::builtin("", "v1", "services", "Service", true, true),
            ResourceInfo::builtin("", "v1", "pods", "Pod", true, true).with_generation(),
            ResourceInfo::builtin("", "v1", "secrets", "Secret", true, false),
            ResourceInfo::builtin("", "v1", "configmaps", "ConfigMap", true, false),
            ResourceInfo::builtin("", "v1", "serviceaccounts", "ServiceAccount", true, false),
            ResourceInfo::builtin("", "v1", "events", "Event", true, false),
            ResourceInfo::builtin("events.k8s.io", "v1", "events", "Event", true, false),
            ResourceInfo::builtin("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", true, false)
                .with_generation(),
            ResourceInfo::builtin("coordination.k8s.io", "v1", "leases", "Lease", true, false),
            ResourceInfo::builtin(
                "apiextensions.k8s.io",
                "v1",
                "customresourcedefinitions",
                "CustomResourceDefinition",
                false,
                true,
            )
            .with_generation(),
        ] {
            r.insert(info);
        }
        r
    }

    pub(crate) fn insert(&mut self, info: ResourceInfo) {
        self.by_group_plural.insert((info.group.clone(), info.plural.clone()), info);
    }

    pub(crate) fn remove(&mut self, group: &str, plural: &str) {
        self.by_group_plural.remove(&(group.to_string(), plural.to_string()));
    }

    /// Finds a resource by group and plural, whatever the version.
    pub(crate) fn get(&self, group: &str, plural: &str) -> Option<&ResourceInfo> {
        self.by_group_plural.get(&(group.to_string(), plural.to_string()))
    }

    /// Finds a resource served at `group/version` under `plural`.
    pub(crate) fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceInfo> {
        self.by_group_plural
            .get(&(group.to_string(), plural.to_string()))
            .filter(|info| info.versions.iter().any(|v| v == version))
    }
}
