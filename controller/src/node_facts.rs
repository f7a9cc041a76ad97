//! The Nodes' facts for L2 speakers ([`ferrolb_api::node_facts`]): while an
//! L2Advertisement exists, the leader watches every Node and keeps one ConfigMap of facts
//! per Node in its namespace, written only when a fact changes (a kubelet's heartbeat
//! changes none), so that speakers need not watch every Node. With no L2Advertisement it
//! deletes them: BGP speakers read their own Node only.
//!
//! Crash-only: what is published is read back from the API (a watch of the facts
//! ConfigMaps), never remembered, and every difference from the Nodes is written again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ferrolb_api::node_facts::{COMPLETE_NAME, complete_config_map, config_map_name, selector};
use ferrolb_api::{FactsNode, NodeFacts, Slim};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::context::{Context, REPORTING_CONTROLLER};
use crate::error::{CallError, Error};
use crate::fence::CALL_TIMEOUT;

/// How soon writes that failed are tried again.
const RETRY: Duration = Duration::from_secs(5);

/// What a facts ConfigMap holds, or should: the node, its facts and its Node's uid.
/// Shared: what is published, where it is what the Node says, is held once.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    node: String,
    facts: NodeFacts,
    uid: Option<String>,
}

/// Objects of one watch by name, as last listed and watched since; a relist is gathered
/// aside and takes the place of the old whole, at its end.
struct Listing<T> {
    now: BTreeMap<String, T>,
    relist: Option<BTreeMap<String, T>>,
    listed: bool,
}

impl<T> Default for Listing<T> {
    fn default() -> Self {
        Listing { now: BTreeMap::new(), relist: None, listed: false }
    }
}

impl<T: PartialEq> Listing<T> {
    /// Applies a watch event, each object read by `read` as its key and value; returns
    /// whether what is listed changed.
    fn apply<K>(&mut self, ev: Event<K>, read: impl Fn(&K) -> (String, T)) -> bool {
        match ev {
            Event::Init => {
                self.relist = Some(BTreeMap::new());
                false
            }
            Event::InitApply(o) => {
                let (k, v) = read(&o);
                self.relist.get_or_insert_default().insert(k, v);
                false
            }
            Event::InitDone => {
                self.now = self.relist.take().unwrap_or_default();
                self.listed = true;
                true
            }
            Event::Apply(o) => {
                let (k, v) = read(&o);
                self.now.get(&k) != Some(&v) && {
                    self.now.insert(k, v);
                    true
                }
            }
            Event::Delete(o) => self.now.remove(&read(&o).0).is_some(),
        }
    }
}

/// What the Nodes say each facts ConfigMap should hold (by its name), and what they hold.
#[derive(Default)]
struct Facts {
    nodes: Listing<Arc<Entry>>,
    /// None: a ConfigMap of ours that publishes nothing readable.
    published: Listing<Option<Arc<Entry>>>,
}

/// One write that brings a ConfigMap to what its Node says.
#[derive(Debug, PartialEq)]
enum Write {
    /// Create or update it (server-side apply).
    Apply(String, Arc<Entry>),
    /// Delete it: its Node is gone (or it is not readable).
    Delete(String),
    /// Say that every Node's facts are published ([`COMPLETE_NAME`]).
    Complete,
}

impl Write {
    /// The ConfigMap written.
    fn name(&self) -> &str {
        match self {
            Write::Apply(name, _) | Write::Delete(name) => name,
            Write::Complete => COMPLETE_NAME,
        }
    }

    /// What is applied to it in namespace `ns`; None: it is deleted.
    fn applied(&self, ns: &str) -> Option<ConfigMap> {
        match self {
            Write::Apply(_, e) => Some(e.facts.config_map(&e.node, e.uid.as_deref(), ns)),
            Write::Complete => Some(complete_config_map(ns)),
            Write::Delete(_) => None,
        }
    }
}

impl Facts {
    fn node(n: &FactsNode) -> (String, Arc<Entry>) {
        let Slim(n) = n;
        let node = n.name_any();
        let entry = Entry { facts: NodeFacts::of(n), uid: n.metadata.uid.clone(), node };
        (config_map_name(&entry.node), Arc::new(entry))
    }

    /// A ConfigMap's entry; the Node's own (`nodes`, by ConfigMap name) where equal.
    fn config_map(cm: &ConfigMap, nodes: &BTreeMap<String, Arc<Entry>>) -> (String, Option<Arc<Entry>>) {
        let name = cm.name_any();
        let entry = NodeFacts::from_config_map(cm).ok().map(|(node, facts)| {
            let entry = Entry { node, facts, uid: NodeFacts::owner_uid(cm).map(str::to_owned) };
            match nodes.get(&name) {
                Some(same) if **same == entry => Arc::clone(same),
                _ => Arc::new(entry),
            }
        });
        (name, entry)
    }

    /// The writes to make, once both watches have listed; [`Write::Complete`] once no
    /// other is left.
    fn writes(&self) -> Vec<Write> {
        if !(self.nodes.listed && self.published.listed) {
            return Vec::new();
        }
        let (want, have) = (&self.nodes.now, &self.published.now);
        let apply = want
            .iter()
            .filter(|(name, e)| have.get(*name).and_then(Option::as_ref) != Some(*e))
            .map(|(name, e)| Write::Apply(name.clone(), e.clone()));
        let delete = have
            .keys()
            .filter(|name| *name != COMPLETE_NAME && !want.contains_key(*name))
            .map(|n| Write::Delete(n.clone()));
        let writes: Vec<Write> = apply.chain(delete).collect();
        if writes.is_empty() && !have.contains_key(COMPLETE_NAME) {
            return vec![Write::Complete];
        }
        writes
    }

    /// Records a write the API took (its watch event may come later).
    fn wrote(&mut self, w: Write) {
        match w {
            Write::Apply(name, e) => self.published.now.insert(name, Some(e)),
            Write::Delete(name) => self.published.now.remove(&name),
            Write::Complete => self.published.now.insert(COMPLETE_NAME.to_owned(), None),
        };
    }
}

/// Publishes the Nodes' facts while `l2` says an L2Advertisement exists, and removes them
/// while it says none does (`None`: not known yet).
pub async fn task(ctx: Arc<Context>, mut l2: watch::Receiver<Option<bool>>) -> Result<(), Error> {
    loop {
        let Ok(wanted) = l2.wait_for(Option::is_some).await.map(|v| *v == Some(true)) else {
            return Err(Error::WatchStopped("L2Advertisement"));
        };
        if wanted {
            info!("L2Advertisements exist: publishing every Node's facts");
            tokio::select! {
                r = publish(&ctx) => r?,
                _ = l2.wait_for(|v| *v == Some(false)) => {}
            }
        } else {
            tokio::select! {
                () = retract(&ctx) => {}
                _ = l2.wait_for(|v| *v == Some(true)) => continue,
            }
            // Nothing to do until an L2Advertisement comes.
            if l2.wait_for(|v| *v == Some(true)).await.is_err() {
                return Err(Error::WatchStopped("L2Advertisement"));
            }
        }
    }
}

fn config_maps(ctx: &Context) -> Api<ConfigMap> {
    Api::namespaced(ctx.client.clone(), &ctx.settings.namespace)
}

/// Watches the Nodes and the facts, writing every difference, until an error ends it.
async fn publish(ctx: &Context) -> Result<(), Error> {
    // Deserialized with only what the facts read (no managedFields, images, nodeInfo).
    let nodes = watched(Api::<FactsNode>::all(ctx.client.clone()), watcher::Config::default());
    let published = watched(config_maps(ctx), watcher::Config::default().labels(&selector()));
    let (mut nodes, mut published) = (std::pin::pin!(nodes), std::pin::pin!(published));
    let mut facts = Facts::default();
    let mut dirty = false;
    loop {
        tokio::select! {
            ev = nodes.next() => match ev {
                Some(Ok(ev)) => dirty |= facts.nodes.apply(ev, Facts::node),
                Some(Err(e)) => warn!(error = %e, "Node watch failed; retrying"),
                None => return Err(Error::WatchStopped("Node")),
            },
            ev = published.next() => match ev {
                Some(Ok(ev)) => {
                    let nodes = &facts.nodes.now;
                    dirty |= facts.published.apply(ev, |cm| Facts::config_map(cm, nodes));
                }
                Some(Err(e)) => warn!(error = %e, "ConfigMap watch (Node facts) failed; retrying"),
                None => return Err(Error::WatchStopped("ConfigMap")),
            },
            () = tokio::time::sleep(RETRY), if dirty => {}
        }
        if dirty {
            dirty = !write(ctx, &mut facts).await;
        }
    }
}

fn watched<K: ferrolb_api::Watched>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<K>, watcher::Error>> + Send {
    watcher::watcher(api, config).backoff(crate::run::watch_backoff())
}

/// Makes every write the facts call for (the last, [`Write::Complete`], once all others
/// were taken); returns whether all were taken.
async fn write(ctx: &Context, facts: &mut Facts) -> bool {
    let api = config_maps(ctx);
    let ns = &ctx.settings.namespace;
    let params = PatchParams::apply(REPORTING_CONTROLLER).force();
    loop {
        let writes = facts.writes();
        if writes.is_empty() {
            return true;
        }
        let mut all = true;
        for w in writes {
            let r = match w.applied(ns) {
                Some(cm) => {
                    let patch = Patch::Apply(&cm);
                    ctx.fence.call(CALL_TIMEOUT, api.patch(w.name(), &params, &patch)).await.map(drop)
                }
                None => delete(ctx, &api, w.name()).await,
            };
            match r {
                Ok(()) => {
                    ctx.metrics.node_facts_writes.inc();
                    facts.wrote(w);
                }
                Err(source) => {
                    all = false;
                    let object = format!("ConfigMap {}", w.name());
                    let e = Error::Write { what: "Node facts", object, source };
                    warn!(error = %e, "retrying in {RETRY:?}");
                }
            }
        }
        if !all {
            return false;
        }
    }
}

/// Deletes a ConfigMap; one already gone is as good.
async fn delete(ctx: &Context, api: &Api<ConfigMap>, name: &str) -> Result<(), CallError> {
    match ctx.fence.call(CALL_TIMEOUT, api.delete(name, &DeleteParams::default())).await {
        Err(e) if e.status() == Some(404) => Ok(()),
        r => r.map(drop),
    }
}

/// Deletes every facts ConfigMap, retrying until none is left.
async fn retract(ctx: &Context) {
    let api = config_maps(ctx);
    loop {
        let listed =
            ctx.fence.call(CALL_TIMEOUT, api.list_metadata(&ListParams::default().labels(&selector()))).await;
        // The one saying all are published goes first: no speaker reads a part as whole.
        let names: Vec<String> = match listed {
            Ok(list) => {
                let mut names: Vec<String> = list.items.iter().map(|m| m.name_any()).collect();
                names.sort_by_key(|n| n != COMPLETE_NAME);
                names
            }
            // Without the grant none can have been written (RBAC of an older release).
            Err(e) if e.status() == Some(403) => {
                warn!(error = %e, "may not list ConfigMaps: no Node facts to delete");
                return;
            }
            Err(e) => {
                warn!(error = %e, "cannot list the Node facts ConfigMaps; retrying in {RETRY:?}");
                tokio::time::sleep(RETRY).await;
                continue;
            }
        };
        let mut left = names.len();
        if left > 0 {
            info!(config_maps = left, "no L2Advertisement: deleting the Node facts");
        }
        for name in names {
            match delete(ctx, &api, &name).await {
                Ok(()) => {
                    ctx.metrics.node_facts_writes.inc();
                    left -= 1;
                }
                Err(e) => {
                    warn!(config_map = %name, error = %e, "cannot delete Node facts");
                    if name == COMPLETE_NAME {
                        break;
                    }
                }
            }
        }
        if left == 0 {
            return;
        }
        tokio::time::sleep(RETRY).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn node(name: &str, uid: &str, labels: &[(&str, &str)]) -> FactsNode {
        Slim(Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(uid.into()),
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn published(Slim(n): &FactsNode) -> ConfigMap {
        NodeFacts::of(n).config_map(&n.name_any(), n.metadata.uid.as_deref(), "ns")
    }

    fn listed<T: PartialEq, K>(l: &mut Listing<T>, objects: Vec<K>, read: impl Fn(&K) -> (String, T)) {
        l.apply(Event::Init, &read);
        for o in objects {
            l.apply(Event::InitApply(o), &read);
        }
        assert!(l.apply(Event::InitDone, &read));
    }

    #[test]
    fn only_what_differs_is_written_and_nothing_before_both_lists() {
        let (a, b, c) = (node("a", "1", &[]), node("b", "2", &[("zone", "x")]), node("c", "3", &[]));
        let mut f = Facts::default();
        listed(&mut f.nodes, vec![a.clone(), b.clone()], Facts::node);
        assert_eq!(f.writes(), [], "the published facts are not listed yet");
        // b is published with old labels, c's Node is gone, d's ConfigMap is unreadable.
        let mut broken = published(&c);
        broken.metadata.name = Some("node-facts.d".into());
        broken.data = None;
        let nodes = f.nodes.now.clone();
        listed(&mut f.published, vec![published(&node("b", "2", &[])), published(&c), broken], |cm| {
            Facts::config_map(cm, &nodes)
        });
        let writes = f.writes();
        assert_eq!(
            writes,
            [
                Write::Apply("node-facts.a".into(), Facts::node(&a).1),
                Write::Apply("node-facts.b".into(), Facts::node(&b).1),
                Write::Delete("node-facts.c".into()),
                Write::Delete("node-facts.d".into()),
            ]
        );
        for w in writes {
            f.wrote(w);
        }
        // Every Node's facts are published, which is said last.
        assert_eq!(f.writes(), [Write::Complete]);
        f.wrote(Write::Complete);
        assert_eq!(f.writes(), []);

        // A heartbeat changes no fact: nothing to write. A new uid (the Node made again) is
        // a new owner.
        let mut beat = b.clone();
        beat.0.metadata.resource_version = Some("99".into());
        assert!(!f.nodes.apply(Event::Apply(beat), Facts::node));
        assert!(f.nodes.apply(Event::Apply(node("b", "2b", &[("zone", "x")])), Facts::node));
        assert_eq!(f.writes().len(), 1);
        // The watch of the ConfigMaps says so later: nothing changes.
        let (name, e) = Facts::config_map(&published(&a), &f.nodes.now);
        assert_eq!(Some(&e), f.published.now.get(&name));
    }

    #[test]
    fn facts_published_as_their_node_says_are_held_once() {
        let (a, b) = (node("a", "1", &[("zone", "x")]), node("b", "2", &[]));
        let mut f = Facts::default();
        listed(&mut f.nodes, vec![a.clone(), b.clone()], Facts::node);
        // After a restart: a is published as its Node says, b with other labels.
        let nodes = f.nodes.now.clone();
        let stale = published(&node("b", "2", &[("zone", "y")]));
        listed(&mut f.published, vec![published(&a), stale], |cm| Facts::config_map(cm, &nodes));
        let once = |f: &Facts, n: &str| Arc::ptr_eq(f.published.now[n].as_ref().unwrap(), &f.nodes.now[n]);
        assert!(once(&f, "node-facts.a"));
        assert!(!once(&f, "node-facts.b"));
        // Once written, b's is held once too.
        let writes = f.writes();
        assert_eq!(writes, [Write::Apply("node-facts.b".into(), Facts::node(&b).1)]);
        f.wrote(writes.into_iter().next().unwrap());
        assert!(once(&f, "node-facts.b"));
    }

    #[test]
    fn a_relist_replaces_the_whole_listing_at_its_end() {
        let mut f = Facts::default();
        listed(&mut f.nodes, vec![node("a", "1", &[]), node("b", "2", &[])], Facts::node);
        f.nodes.apply(Event::Init, Facts::node);
        f.nodes.apply(Event::InitApply(node("b", "2", &[])), Facts::node);
        assert_eq!(f.nodes.now.len(), 2, "kept until the relist ends");
        f.nodes.apply(Event::InitDone, Facts::node);
        assert_eq!(f.nodes.now.keys().collect::<Vec<_>>(), ["node-facts.b"]);
    }
}
