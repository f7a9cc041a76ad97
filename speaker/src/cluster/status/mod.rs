//! Kubernetes mode status: one ServiceAnnouncement per Service, node and protocol this
//! node announces (owner reference to the Service, so garbage collection removes it
//! even while the speaker is down), and Events on the Service when it starts or stops.
//!
//! On each plan the event loop's [`Tracker`] works out which Services' status changed
//! and leaves them in the [`Outbox`] of the writer task ([`spawn`]), which converges the
//! API Service by Service, retrying with back-off while the apiserver is unreachable;
//! the loop never waits on the API. At start the writer lists this node's existing
//! objects first, so stale ones left by a crash are deleted and unchanged ones are not
//! rewritten.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ferrolb_api::{AnnouncementProtocol, ServiceAnnouncement};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::time::Instant;

use crate::metrics::{Metrics, ReasonLabel, ResultLabel};
use crate::model::ServiceKey;

mod desired;
mod outbox;
mod record;

pub use desired::{Shown, Tracker, Update, desired, shown};
use outbox::Inbox;
pub use outbox::Outbox;
pub use record::{Interner, MANAGER, NODE_LABEL, Names, ObjectKey, Record, object_name};
use record::{label_value, proto_name, service_of};

/// Events per Service in a burst; then one per [`EVENT_REFILL`].
const EVENT_BURST: u32 = 3;
/// How often a Service earns one more Event.
const EVENT_REFILL: Duration = Duration::from_secs(20);
/// Events of this speaker, all Services together, in a burst; then one a second. Every
/// speaker reports on every Service it announces: 10 000 Services created at once would
/// otherwise be 10 000 Events from each node (and as many requests, beside the
/// ServiceAnnouncements, against the speaker's request limit). Suppressed Events are
/// counted in `ferrolb_speaker_events_suppressed_total`; the ServiceAnnouncements say
/// the same.
const EVENTS_BURST: u32 = 30;
/// How often this speaker earns one more Event.
const EVENTS_REFILL: Duration = Duration::from_secs(1);
/// Retry back-off bounds while writes fail.
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Token buckets, so a flapping plan cannot flood a Service with Events (one per
/// Service) and a burst of Services cannot flood the apiserver (one for them all).
#[derive(Debug)]
pub struct EventLimiter {
    buckets: HashMap<ServiceKey, (u32, Instant)>,
    /// Every Service's: (tokens, last refill; None before the first Event).
    total: (u32, Option<Instant>),
    /// Its size and refill period.
    total_limit: (u32, Duration),
}

impl Default for EventLimiter {
    fn default() -> Self {
        EventLimiter::with_total(EVENTS_BURST, EVENTS_REFILL)
    }
}

/// Refills `bucket` (tokens, last refill) for `now`, at one token per `refill`, up to `burst`.
fn refill(bucket: &mut (u32, Instant), now: Instant, burst: u32, refill: Duration) {
    let earned = now.saturating_duration_since(bucket.1).as_millis() / refill.as_millis().max(1);
    let earned = u32::try_from(earned).unwrap_or(u32::MAX);
    if earned > 0 {
        bucket.0 = bucket.0.saturating_add(earned).min(burst);
        bucket.1 = now;
    }
}

impl EventLimiter {
    /// Limits as the default does per Service, and to `burst` then one per `refill` in all.
    pub fn with_total(burst: u32, refill: Duration) -> Self {
        EventLimiter { buckets: HashMap::new(), total: (burst, None), total_limit: (burst, refill) }
    }

    /// Whether an Event about `key` may go out at `now` (and takes a token if so).
    pub fn allow(&mut self, key: &ServiceKey, now: Instant) -> bool {
        let mut total = (self.total.0, self.total.1.unwrap_or(now));
        refill(&mut total, now, self.total_limit.0, self.total_limit.1);
        self.total = (total.0, Some(total.1));
        if total.0 == 0 {
            return false;
        }
        let bucket = self.buckets.entry(key.clone()).or_insert((EVENT_BURST, now));
        refill(bucket, now, EVENT_BURST, EVENT_REFILL);
        if bucket.0 == 0 {
            return false;
        }
        bucket.0 -= 1;
        self.total.0 -= 1;
        true
    }

    /// Forgets the buckets that have refilled completely by `now` (a full bucket limits
    /// nothing, like none), so Services that come and go leave nothing behind.
    pub fn prune(&mut self, now: Instant) {
        self.buckets.retain(|_, (tokens, since)| {
            now.saturating_duration_since(*since) < EVENT_REFILL * EVENT_BURST.saturating_sub(*tokens)
        });
        if self.buckets.capacity() > 4 * self.buckets.len().max(64) {
            self.buckets.shrink_to_fit();
        }
    }

    /// How many Services have a bucket.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether no Service has a bucket.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

/// What the API holds for one Service, as far as the writer knows.
#[derive(Debug)]
enum Held {
    /// Exactly these objects, named as this release names them: what it wrote last, so
    /// at rest the writer holds no more per Service than the status it shares.
    Written(Arc<Shown>),
    /// These objects, as listed or partly written.
    Objects(Vec<(ObjectKey, Record)>),
}

impl Held {
    /// How many objects the API holds.
    fn len(&self) -> usize {
        match self {
            Held::Written(s) => s.objects.len(),
            Held::Objects(o) => o.len(),
        }
    }
}

struct Writer {
    node: String,
    client: kube::Client,
    recorder: Recorder,
    /// Events published through `recorder` (see [`RECORDER_EVENTS`]).
    published: usize,
    metrics: Arc<Metrics>,
    limiter: EventLimiter,
    /// What the API holds, per Service, as far as this writer knows (None: not listed yet).
    current: Option<BTreeMap<ServiceKey, Held>>,
    /// The latest status of every Service showing something.
    wanted: BTreeMap<ServiceKey, Arc<Shown>>,
    /// The Services whose objects may differ from `wanted`.
    dirty: BTreeSet<ServiceKey>,
    /// Whether the first complete set has come (nothing is written before).
    started: bool,
}

/// Events published through one [`Recorder`] before it is replaced by a fresh one.
/// kube's Recorder keeps every Event it published for 6 minutes (to count repeats into
/// a series), keyed by the object's uid: 10 000 Services created and deleted held
/// 20 000 Events in memory per cycle. Renewing it bounds that; only the count of a
/// repeat straddling the swap is lost, and the [`EventLimiter`] keeps repeats rare.
const RECORDER_EVENTS: usize = 512;

fn recorder(client: &kube::Client, node: &str) -> Recorder {
    Recorder::new(client.clone(), Reporter { controller: MANAGER.into(), instance: Some(node.to_owned()) })
}

/// Starts the writer; send it each plan's status changes ([`Tracker::update`]). Nothing
/// is written before the first complete set, so a speaker that has not synced its model
/// yet never deletes what an earlier run announced.
pub fn spawn(client: kube::Client, node: &str, metrics: Arc<Metrics>) -> Outbox {
    let (outbox, inbox) = outbox::pair();
    let writer = Writer {
        node: node.to_owned(),
        recorder: recorder(&client, node),
        published: 0,
        client,
        metrics,
        limiter: EventLimiter::default(),
        current: None,
        wanted: BTreeMap::new(),
        dirty: BTreeSet::new(),
        started: false,
    };
    tokio::spawn(writer.run(inbox));
    outbox
}

impl Writer {
    async fn run(mut self, inbox: Inbox) {
        let mut backoff = RETRY_MIN;
        let mut failing = false;
        loop {
            let update = inbox.take();
            if update.complete || !update.services.is_empty() {
                self.absorb(update).await;
            }
            if self.started {
                match self.converge(&inbox).await {
                    Ok(()) => {
                        if failing {
                            tracing::info!("ServiceAnnouncements written again after failures");
                        }
                        failing = false;
                        backoff = RETRY_MIN;
                    }
                    Err(e) => {
                        if !failing {
                            tracing::warn!(error = %e, "cannot write ServiceAnnouncements; retrying with back-off (announcements are unaffected)");
                        }
                        failing = true;
                        tokio::select! {
                            open = inbox.wait() => if !open { return },
                            () = tokio::time::sleep(backoff) => {}
                        }
                        backoff = (backoff * 2).min(RETRY_MAX);
                        continue;
                    }
                }
            }
            if !inbox.has_pending() && !inbox.wait().await {
                return;
            }
        }
    }

    /// Listed objects grouped by Service, as the status this release would show for
    /// them (one object per protocol, under the names this release gives), so an object
    /// an older release named otherwise still matches its Service and protocol.
    fn named_anew(listed: &BTreeMap<ServiceKey, Held>) -> BTreeMap<ServiceKey, Arc<Shown>> {
        listed
            .iter()
            .map(|(svc, held)| {
                let shown = match held {
                    Held::Written(s) => s.clone(),
                    Held::Objects(objects) => {
                        let mut records: Vec<Record> = Vec::new();
                        for (_, r) in objects {
                            if !records.iter().any(|o| o.protocol == r.protocol) {
                                records.push(r.clone());
                            }
                        }
                        Arc::new(Shown { objects: records.into(), ..Shown::default() })
                    }
                };
                (svc.clone(), shown)
            })
            .collect()
    }

    /// Service `svc`'s `objects` under the names this release gives them.
    fn named(&self, svc: &ServiceKey, objects: &[Record]) -> Vec<(ObjectKey, Record)> {
        objects
            .iter()
            .map(|r| {
                ((svc.namespace.clone(), object_name(&svc.name, &self.node, r.protocol).into()), r.clone())
            })
            .collect()
    }

    async fn list(&self) -> Result<BTreeMap<ServiceKey, Held>, kube::Error> {
        let api: Api<ServiceAnnouncement> = Api::all(self.client.clone());
        let lp = ListParams::default().labels(&format!("{NODE_LABEL}={}", label_value(&self.node)));
        let list = super::within(api.list(&lp)).await?;
        let mut out: BTreeMap<ServiceKey, Vec<(ObjectKey, Record)>> = BTreeMap::new();
        for o in list.items.into_iter().filter(|o| o.spec.node == self.node) {
            let key: ObjectKey = (
                o.metadata.namespace.as_deref().unwrap_or_default().into(),
                o.metadata.name.as_deref().unwrap_or_default().into(),
            );
            out.entry(service_of(&o.spec)).or_default().push((key, Record::of(o)));
        }
        Ok(out.into_iter().map(|(svc, objects)| (svc, Held::Objects(objects))).collect())
    }

    fn count(&self, result: &str) {
        self.metrics.status_writes.get_or_create(&ResultLabel { result: result.into() }).inc();
    }

    /// Takes in the latest changes: Events for what started or stopped being announced,
    /// and the Services to converge. The first set is compared with what the API showed
    /// (an earlier run's objects), so a restart does not re-announce everything in Events.
    async fn absorb(&mut self, update: Update) {
        if !self.started {
            if self.current.is_none() {
                self.current = self.list().await.ok();
            }
            if let Some(c) = &self.current {
                self.wanted = Self::named_anew(c);
                self.dirty.extend(c.keys().cloned());
            }
        }
        let mut changes = update.services;
        if update.complete {
            // Every Service the set does not name shows nothing.
            for key in self.wanted.keys() {
                changes.entry(key.clone()).or_insert(None);
            }
            self.started = true;
        }
        let now = Instant::now();
        let (mut announced, mut withdrawn) = (0usize, 0usize);
        for (key, new) in changes {
            let old = match &new {
                Some(s) => self.wanted.insert(key.clone(), s.clone()),
                None => self.wanted.remove(&key),
            };
            let (a, w) = self.events(&key, old.as_deref(), new.as_deref(), now).await;
            (announced, withdrawn) = (announced + a, withdrawn + w);
            self.dirty.insert(key);
        }
        if announced + withdrawn > 0 {
            tracing::info!(
                announced,
                withdrawn,
                "Services announced or withdrawn by this node (each at debug)"
            );
        }
        self.limiter.prune(now);
    }

    /// Writes what differs, deletes what is no longer wanted, Service by Service; stops
    /// early once newer changes wait in `inbox` (the latest status wins).
    async fn converge(&mut self, inbox: &Inbox) -> Result<(), kube::Error> {
        if self.current.is_none() {
            let listed = self.list().await?;
            tracing::info!(
                existing = listed.values().map(Held::len).sum::<usize>(),
                "listed this node's ServiceAnnouncements"
            );
            self.dirty.extend(listed.keys().cloned());
            self.current = Some(listed);
        }
        while let Some(key) = self.dirty.first().cloned() {
            if inbox.has_pending() {
                return Ok(());
            }
            let want = self.wanted.get(&key).cloned();
            let mut current = match self.current.as_mut().and_then(|c| c.remove(&key)) {
                Some(Held::Written(s)) => self.named(&key, &s.objects),
                Some(Held::Objects(o)) => o,
                None => Vec::new(),
            };
            let result = self.write(&key, &mut current, want.as_deref().map_or(&[], |s| &s.objects)).await;
            let held = match (&result, want) {
                // The API now holds exactly the wanted objects: share the status.
                (Ok(()), Some(w)) => (!w.objects.is_empty()).then_some(Held::Written(w)),
                _ => (!current.is_empty()).then_some(Held::Objects(current)),
            };
            if let Some(held) = held {
                self.current.get_or_insert_default().insert(key.clone(), held);
            }
            result?;
            self.dirty.remove(&key);
        }
        Ok(())
    }

    /// Converges Service `svc`'s objects (`current`, as the API holds them) to `want`.
    async fn write(
        &self,
        svc: &ServiceKey,
        current: &mut Vec<(ObjectKey, Record)>,
        want: &[Record],
    ) -> Result<(), kube::Error> {
        let want = self.named(svc, want);
        while let Some(i) = current.iter().position(|(k, _)| !want.iter().any(|(w, _)| w == k)) {
            let (ns, name) = &current[i].0;
            let api: Api<ServiceAnnouncement> = Api::namespaced(self.client.clone(), ns);
            match super::within(api.delete(name, &DeleteParams::default())).await {
                Ok(_) => self.count("deleted"),
                // Garbage-collected with its Service, or deleted by hand: gone is fine.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    self.count("error");
                    return Err(e);
                }
            }
            tracing::debug!(namespace = %ns, name = %name, "deleted ServiceAnnouncement");
            current.remove(i);
        }
        for (k, record) in want {
            let held = current.iter().position(|(c, _)| *c == k);
            if held.is_some_and(|i| current[i].1 == record) {
                continue;
            }
            let api: Api<ServiceAnnouncement> = Api::namespaced(self.client.clone(), &k.0);
            let pp = PatchParams::apply(MANAGER).force();
            let obj = record.object(svc, &k.1, &self.node);
            if let Err(e) = super::within(api.patch(&k.1, &pp, &Patch::Apply(&obj))).await {
                self.count("error");
                return Err(e);
            }
            self.count("applied");
            // What was sent (the apiserver returns the same spec; an object changed since
            // is rewritten at the next relist of this writer, after a restart).
            match held {
                Some(i) => current[i].1 = record,
                None => current.push((k, record)),
            }
        }
        Ok(())
    }

    /// Events for Service `svc`'s objects that started or stopped being announced, from
    /// its `old` status to its `new` one (by object name: one per protocol on this node).
    /// Returns how many of each.
    ///
    /// Only what one node can say alone becomes an Event: an L2 address has one owner at
    /// a time, so its `Announced` tells who took it. A BGP Service (or an active-active L2
    /// one) is announced by every node with a route for it, so an Event from each would be
    /// one per node per Service (5 000 at 5 000 nodes) saying what its ServiceAnnouncement
    /// says. Its withdrawal is an Event only with the planner's reason; one because the
    /// Service is gone or no longer served is the user's own doing, and the deleted object
    /// says it.
    async fn events(
        &mut self,
        svc: &ServiceKey,
        old: Option<&Shown>,
        new: Option<&Shown>,
        now: Instant,
    ) -> (usize, usize) {
        let old_objects = old.map_or(&[][..], |s| &s.objects[..]);
        let new_objects = new.map_or(&[][..], |s| &s.objects[..]);
        let uid = new.map(|s| s.uid.to_string()).filter(|u| !u.is_empty());
        let (mut announced, mut withdrawn) = (0usize, 0usize);
        let joined =
            |addresses: &[IpAddr]| addresses.iter().map(IpAddr::to_string).collect::<Vec<_>>().join(", ");
        // Announced alike by every node that serves it (see above).
        let alike = |r: &Record, status: Option<&Shown>| {
            r.protocol == AnnouncementProtocol::Bgp || status.is_some_and(|s| s.shared)
        };
        for record in new_objects {
            if old_objects.iter().any(|o| o.protocol == record.protocol && o.addresses == record.addresses) {
                continue;
            }
            announced += 1;
            let to = if record.protocol != AnnouncementProtocol::Bgp || record.via.is_empty() {
                String::new()
            } else {
                format!(" to BGPPeer {}", record.via.join(", "))
            };
            let note = format!(
                "node {} announces {} by {}{to}",
                self.node,
                joined(&record.addresses),
                proto_name(record.protocol).to_uppercase()
            );
            if alike(record, new) {
                tracing::debug!(service = %svc, "{note}");
                continue;
            }
            self.event(uid.clone(), svc, "Announced", note, now).await;
        }
        for record in old_objects {
            if new_objects.iter().any(|n| n.protocol == record.protocol) {
                continue;
            }
            withdrawn += 1;
            let reason = new.and_then(|s| s.reason.as_deref());
            let note = format!(
                "node {} withdrew {} ({}): {}",
                self.node,
                joined(&record.addresses),
                proto_name(record.protocol).to_uppercase(),
                reason.unwrap_or("the Service is gone or no longer served")
            );
            if alike(record, old) && reason.is_none() {
                tracing::debug!(service = %svc, "{note}");
                continue;
            }
            self.event(uid.clone(), svc, "Withdrawn", note, now).await;
        }
        (announced, withdrawn)
    }

    async fn event(
        &mut self,
        uid: Option<String>,
        svc: &ServiceKey,
        reason: &str,
        note: String,
        now: Instant,
    ) {
        tracing::debug!(service = %svc, "{note}");
        if !self.limiter.allow(svc, now) {
            self.metrics.events_suppressed.get_or_create(&ReasonLabel { reason: reason.into() }).inc();
            return;
        }
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Service".into()),
            namespace: Some(svc.namespace.to_string()),
            name: Some(svc.name.to_string()),
            uid,
            ..ObjectReference::default()
        };
        let ev = Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(ferrolb_api::event_note(note)),
            action: reason.trim_end_matches("ed").into(),
            secondary: None,
        };
        self.published += 1;
        if self.published > RECORDER_EVENTS {
            self.recorder = recorder(&self.client, &self.node);
            self.published = 1;
        }
        match super::within(self.recorder.publish(&ev, &regarding)).await {
            Ok(()) => {
                self.metrics.events.get_or_create(&ReasonLabel { reason: reason.into() }).inc();
            }
            Err(e) => tracing::debug!(service = %svc, error = %e, "cannot publish Event (best effort)"),
        }
    }
}

#[cfg(test)]
mod tests;
