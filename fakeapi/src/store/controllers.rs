//! What the real cluster's controllers do on a write, done inline: CRDs become
//! Established, namespaces Active and populated.

use serde_json::{Value, json};

use super::{Managed, Store, Target, now};
use crate::resource::ResourceInfo;

/// The ConfigMap holding the cluster's CA bundle, which every namespace has.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

const ROOT_CA_DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";
/// The fake serves no TLS; its CA bundle is a placeholder.
const FAKE_CA: &str = "-----BEGIN CERTIFICATE-----\nZmVycm9sYi1mYWtlYXBp\n-----END CERTIFICATE-----\n";

impl Store {
    /// What the real cluster's controllers would do right away: CRDs become Established, namespaces Active.
    pub(super) fn controllers_on_write(&mut self, t: &Target, obj: &mut Value) {
        match (t.info.group.as_str(), t.info.plural.as_str()) {
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                if let Some(info) = ResourceInfo::from_crd(obj) {
                    self.registry.insert(info);
                }
                let names = obj.pointer("/spec/names").cloned().unwrap_or(Value::Null);
                let ts = now();
                if let Some(m) = obj.as_object_mut() {
                    m.insert(
                        "status".into(),
                        json!({
                            "acceptedNames": names,
                            "conditions": [
                                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "lastTransitionTime": ts},
                                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "lastTransitionTime": ts},
                            ],
                        }),
                    );
                }
            }
            ("", "namespaces") => {
                if let Some(m) = obj.as_object_mut()
                    && !m.contains_key("status")
                {
                    m.insert("status".into(), json!({"phase": "Active"}));
                }
            }
            _ => {}
        }
    }

    /// What kube-controller-manager puts into every new namespace (there, moments later):
    /// the `kube-root-ca.crt` ConfigMap and the `default` ServiceAccount pods run as.
    pub(super) fn populate_namespace(&mut self, ns: &str) {
        let objects = [
            (
                "configmaps",
                json!({
                    "metadata": {"name": ROOT_CA_CONFIGMAP, "annotations": {"kubernetes.io/description": ROOT_CA_DESCRIPTION}},
                    "data": {"ca.crt": FAKE_CA},
                }),
            ),
            ("serviceaccounts", json!({"metadata": {"name": "default"}})),
        ];
        for (plural, obj) in objects {
            if let Some(info) = self.registry.lookup("", "v1", plural).cloned() {
                let t = Target { info, version: "v1".into(), namespace: Some(ns.into()) };
                let _ = self.create(&t, obj, "kube-controller-manager", Managed::Update);
            }
        }
    }
}
