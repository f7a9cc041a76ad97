//! The CustomResourceDefinitions of every kind, as installed from `manifests/crds/`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use super::{
    BfdProfile, BgpAdvertisement, BgpPeer, ControlPlaneVip, IpAddressPool, L2Advertisement,
    ServiceAnnouncement,
};

/// Command that regenerates `manifests/crds/`.
pub const REGENERATE: &str = "cargo run -p ferrolb-api --example crdgen -- manifests/crds";

/// Every ferrolb CRD.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![
        IpAddressPool::crd(),
        BgpPeer::crd(),
        BgpAdvertisement::crd(),
        L2Advertisement::crd(),
        BfdProfile::crd(),
        ControlPlaneVip::crd(),
        ServiceAnnouncement::crd(),
    ];
    for crd in &mut crds {
        let kind = crd.spec.names.kind.clone();
        for version in &mut crd.spec.versions {
            let Some(schema) = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) else {
                continue;
            };
            // Round trip through JSON: the rules are written as JSON, like the apiserver reads them.
            let Ok(mut value) = serde_json::to_value(&*schema) else { continue };
            super::rules::harden(&kind, &mut value);
            if let Ok(hardened) = serde_json::from_value(value) {
                *schema = hardened;
            }
        }
    }
    crds
}

/// Why the manifests could not be rendered.
#[derive(Debug, thiserror::Error)]
#[error("cannot render CRD {name}: {message}")]
pub struct ManifestError {
    /// CRD name.
    pub name: String,
    /// Serializer message.
    pub message: String,
}

/// `(file name, content)` of each CRD file and of `kustomization.yaml`, in a stable order.
pub fn crd_files() -> Result<Vec<(String, String)>, ManifestError> {
    let header = format!("# Generated from api/ by `{REGENERATE}`; do not edit.\n");
    let mut files = Vec::new();
    for crd in crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let yaml = serde_saphyr::to_string(&crd)
            .map_err(|e| ManifestError { name: name.clone(), message: e.to_string() })?;
        let file = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
        files.push((file, format!("{header}{yaml}")));
    }
    let mut kustomization =
        format!("{header}apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n");
    for (file, _) in &files {
        kustomization.push_str(&format!("- {file}\n"));
    }
    files.push(("kustomization.yaml".into(), kustomization));
    Ok(files)
}
