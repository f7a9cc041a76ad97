//! The one Event telling a Service's owner that ferrolb reads one of its annotations in
//! MetalLB's spelling (`metallb.io/…`, `metallb.universe.tf/…`): published once per
//! Service uid and set of spellings ([`crate::model::metallb_note`]), not on every
//! reconcile, and not again after a restart or a change of leader: on start the leader
//! reads back the notices already published (Events expire, by default after an hour;
//! after that a restart publishes them once more).

use std::collections::BTreeMap;

use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::runtime::events::EventType;
use tracing::{debug, info, warn};

use crate::context::{Context, REPORTING_CONTROLLER};
use crate::ipam::ServiceKey;
use crate::model::{self, CachedService};

/// Event reason of the notice.
pub const REASON: &str = "MetalLBAnnotation";

/// Page size when reading the published notices back.
const PAGE: u32 = 500;

/// Remembers (in [`Context::metallb_notices`]) the notices this controller already
/// published, from the Events API. A failure (no `list` on events, a timeout) is logged:
/// notices are then published again, which is noise, not harm.
pub async fn load(ctx: &Context) {
    let api: Api<K8sEvent> = Api::all(ctx.client.clone());
    let mut params = ListParams::default().fields(&format!("reason={REASON}")).limit(PAGE);
    let mut newest: BTreeMap<ServiceKey, (Option<Timestamp>, String, String)> = BTreeMap::new();
    loop {
        let page = match ctx.call(api.list(&params)).await {
            Ok(p) => p,
            Err(e) => {
                warn!(error = %e, "cannot read back the {REASON} Events; they may be published again");
                return;
            }
        };
        for ev in page.items {
            if ev.reporting_controller.as_deref() != Some(REPORTING_CONTROLLER)
                || ev.regarding.as_ref().and_then(|r| r.kind.as_deref()) != Some("Service")
            {
                continue;
            }
            let (Some(regarding), Some(note)) = (ev.regarding, ev.note) else { continue };
            let (Some(ns), Some(name), Some(uid)) = (regarding.namespace, regarding.name, regarding.uid)
            else {
                continue;
            };
            let at = ev.event_time.map(|t| t.0);
            let key = ServiceKey::new(ns, name);
            if newest.get(&key).is_none_or(|(t, ..)| *t <= at) {
                newest.insert(key, (at, uid, note));
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params.continue_token = Some(token),
            None => break,
        }
    }
    debug!(services = newest.len(), "read back the {REASON} Events");
    for (key, (_, uid, note)) in newest {
        ctx.metallb_notices.remember(&key, &uid, &note);
    }
}

/// Publishes the notice for a served Service when its note is new for its uid.
pub async fn notify(svc: &CachedService, ctx: &Context) {
    let Some(note) = model::metallb_note(svc) else {
        return;
    };
    let uid = svc.uid.as_deref().unwrap_or_default();
    if !ctx.metallb_notices.remember(&svc.key, uid, &note) {
        return;
    }
    info!(service = %svc.key, "{note}");
    ctx.event(&svc.versioned_ref(), EventType::Normal, REASON, note).await;
}
