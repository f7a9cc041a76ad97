//! The writes of one reconcile to one Service, each conditional on the version of the
//! Service the allocation was decided from.
//!
//! The timer fence (`fence.rs`) keeps a leader from *sending* once its term has ended,
//! but a request already on the wire (a paused process, a slow link, a proxy that holds
//! it) can still land after another replica leads. So every write also carries
//! `metadata.resourceVersion`: the apiserver refuses it with 409 Conflict when the
//! Service changed since it was read, e.g. because the new leader wrote it. A merge
//! patch with `metadata.resourceVersion` is such a precondition for both `/status` and
//! the object itself.
//!
//! One decision may take several requests (ingress, then conditions, then the
//! annotation). Each bumps the resourceVersion, so the next is conditional on the
//! version the previous one returned: a write in between by anyone else still makes it
//! a 409, and our own first write does not.

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::context::Context;
use crate::error::{CallError, Error};
use crate::ipam::ServiceKey;
use crate::model::CachedService;

/// Which part of the Service a patch writes: status goes through the `/status`
/// subresource, which ignores everything else; metadata through the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `status`, by `PATCH .../services/NAME/status`.
    Status,
    /// `metadata`, by `PATCH .../services/NAME`.
    Metadata,
}

/// How one write went, when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Written; the next write is conditional on the version it made.
    Written,
    /// The Service was deleted meanwhile: its deletion releases it, nothing more to write.
    Gone,
}

/// Whether a write failed because the Service changed since it was read: the decision
/// is stale and is made again from the newer version (which the watch brings, and
/// queues), never sent again as it was.
pub fn is_conflict(err: &Error) -> bool {
    matches!(err, Error::Write { source, .. } if source.status() == Some(409))
}

/// The writes of one reconcile to one Service, in order.
pub struct Writes<'a> {
    ctx: &'a Context,
    svc: &'a CachedService,
    api: Api<Service>,
    /// The version the next write is conditional on: the one decided from, then the one
    /// the last write of ours returned.
    version: Option<String>,
    /// Every version our writes made, in order.
    made: Vec<Box<str>>,
}

impl<'a> Writes<'a> {
    /// Writes to `svc`, conditional on the version the cache holds (the decision's).
    pub fn new(svc: &'a CachedService, ctx: &'a Context) -> Self {
        Writes {
            ctx,
            svc,
            api: Api::namespaced(ctx.client.clone(), svc.key.namespace()),
            version: svc.resource_version.as_deref().map(str::to_owned),
            made: Vec::new(),
        }
    }

    /// All writes are done: remembers the versions a later write of ours superseded (see
    /// [`Superseded`]).
    pub fn done(mut self) {
        self.made.pop();
        self.ctx.superseded.set(&self.svc.key, self.made);
    }

    /// Sends `patch` (a JSON merge patch of `part`, named `what` in errors), with
    /// `metadata.resourceVersion` set to the version it is conditional on.
    pub async fn send(&mut self, part: Part, what: &'static str, patch: Value) -> Result<Sent, Error> {
        let patch = conditional(patch, self.version.as_deref());
        let pp = PatchParams::default();
        let name = self.svc.key.name();
        let call = match part {
            Part::Status => self.ctx.call(self.api.patch_status(name, &pp, &Patch::Merge(&patch))).await,
            Part::Metadata => self.ctx.call(self.api.patch(name, &pp, &Patch::Merge(&patch))).await,
        };
        match call {
            Ok(written) => {
                // An answer without a version would leave the old one: the next write is
                // then refused (409) and decided again, never sent unconditionally.
                if let Some(v) = written.metadata.resource_version {
                    self.made.push(v.as_str().into());
                    self.version = Some(v);
                }
                Ok(Sent::Written)
            }
            Err(e) if e.status() == Some(404) => Ok(Sent::Gone),
            Err(source) => Err(write_error(what, &self.svc.key, source)),
        }
    }
}

fn write_error(what: &'static str, key: &ServiceKey, source: CallError) -> Error {
    Error::Write { what, object: format!("Service {key}"), source }
}

/// `patch` with `metadata.resourceVersion` set to `version` (when known).
fn conditional(mut patch: Value, version: Option<&str>) -> Value {
    if let (Some(v), Some(obj)) = (version, patch.as_object_mut()) {
        let meta = obj.entry("metadata").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert("resourceVersion".into(), json!(v));
        }
    }
    patch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_patch_carries_the_version_it_is_conditional_on() {
        let status = conditional(json!({"status": {"loadBalancer": {"ingress": []}}}), Some("7"));
        assert_eq!(
            status,
            json!({"metadata": {"resourceVersion": "7"}, "status": {"loadBalancer": {"ingress": []}}})
        );
        let meta = conditional(json!({"metadata": {"annotations": {"a": "b"}}}), Some("8"));
        assert_eq!(meta, json!({"metadata": {"annotations": {"a": "b"}, "resourceVersion": "8"}}));
    }
}
