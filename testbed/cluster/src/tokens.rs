//! ServiceAccount tokens from the TokenRequest API, and kubeconfigs that carry them: the
//! components of the lab authenticate as users' do, with their own accounts' tokens.

use std::path::PathBuf;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};

use super::Cluster;
use ferrolb_lab::Error;
use ferrolb_lab::kubeapi::Objects;

impl Cluster {
    /// A kubeconfig for ServiceAccount `namespace/name`, with a token from the
    /// TokenRequest API (24 h), pointing at apiserver `server_node` from inside the lab.
    pub fn token_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
        server_node: usize,
    ) -> Result<PathBuf, Error> {
        let server = self.lab_server(server_node);
        self.token_kubeconfig_for(namespace, name, &server)
    }

    /// Like [`Cluster::token_kubeconfig`], for any server URL (the VIP, the host forwarder).
    pub fn token_kubeconfig_for(&self, namespace: &str, name: &str, server: &str) -> Result<PathBuf, Error> {
        let token = self.token(namespace, name)?;
        let safe = server.replace(['/', ':', '[', ']'], "_");
        self.write_token_kubeconfig(&format!("sa-{namespace}-{name}-{safe}"), namespace, name, &token, server)
    }

    /// Like [`Cluster::token_kubeconfig_for`] with a [`Cluster::bound_token`].
    pub fn bound_token_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
        bound: &BoundObjectReference,
        server: &str,
    ) -> Result<PathBuf, Error> {
        let token = self.bound_token(namespace, name, bound)?;
        let safe = server.replace(['/', ':', '[', ']'], "_");
        let to = format!(
            "{}-{}",
            bound.kind.as_deref().unwrap_or("").to_lowercase(),
            bound.name.as_deref().unwrap_or("")
        );
        self.write_token_kubeconfig(
            &format!("sa-{namespace}-{name}-{to}-{safe}"),
            namespace,
            name,
            &token,
            server,
        )
    }

    /// Writes `<stem>.conf` in the cluster's directory: `server` with ServiceAccount
    /// `namespace/name`'s `token`.
    fn write_token_kubeconfig(
        &self,
        stem: &str,
        namespace: &str,
        name: &str,
        token: &str,
        server: &str,
    ) -> Result<PathBuf, Error> {
        let path = self.paths.dir.join(format!("{stem}.conf"));
        let user = format!("system:serviceaccount:{namespace}:{name}");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster:\n    server: {server}\n    \
             certificate-authority: {ca}\nusers:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- \
             name: lab\n  context:\n    cluster: lab\n    user: {user}\ncurrent-context: lab\n",
            ca = self.paths.ca_cert().display()
        );
        // Atomically: a process started a moment ago may be reading the previous one.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &path)?;
        Ok(path)
    }

    /// A ServiceAccount token from the TokenRequest API.
    pub fn token(&self, namespace: &str, name: &str) -> Result<String, Error> {
        self.request_token(namespace, name, None)
    }

    /// A ServiceAccount token bound to `bound` (a Pod or a Node), as a kubelet requests a
    /// pod's projected token: the apiserver then names the object's node in the token's
    /// user (extra `authentication.kubernetes.io/node-name`), and the token dies with the
    /// object. A Pod must run as the ServiceAccount and be bound to a node already.
    pub fn bound_token(
        &self,
        namespace: &str,
        name: &str,
        bound: &BoundObjectReference,
    ) -> Result<String, Error> {
        self.request_token(namespace, name, Some(bound.clone()))
    }

    fn request_token(
        &self,
        namespace: &str,
        name: &str,
        bound: Option<BoundObjectReference>,
    ) -> Result<String, Error> {
        let sas: Api<ServiceAccount> = Api::namespaced(self.client(), namespace);
        let req = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(24 * 3600),
                bound_object_ref: bound,
                ..Default::default()
            },
            ..Default::default()
        };
        let got = self
            .block_on(sas.create_token_request(name, &PostParams::default(), &req))
            .map_err(|e| Error::Parse(format!("TokenRequest for {namespace}/{name}: {e}")))?;
        got.status
            .map(|s| s.token)
            .ok_or_else(|| Error::Parse(format!("TokenRequest for {namespace}/{name}: no token")))
    }
}
