//! The Services waiting for a reconcile, each at most once.
//!
//! Latest state wins: a reconcile reads the Service from the watch cache, never from the
//! queue, so a Service queued twice needs one reconcile, and the queue holds at most one
//! entry per Service. A channel would instead grow with every event: a relist queues
//! every Service, and each release re-queues every Service still waiting for an address,
//! so deleting 10 000 Services with 1 000 waiting for an address would queue ten million.
//!
//! The reconciler is offered at most [`IN_FLIGHT`] Services whose reconcile has not
//! started; the rest wait here, where they are cheaper. The reconciler reports each start
//! ([`WorkQueue::started`]), and the applier each Service it found gone.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::Stream;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::Notify;

use crate::ipam::ServiceKey;
use crate::model::{self, CachedService};

/// Services handed to the reconciler whose reconcile has not started yet. kube's applier
/// takes every reference it is offered into its scheduler at once, where each costs far
/// more than here: a cold start with 100k Services peaked at 470 MiB, and at 393 MiB
/// offered this many at a time (`ferrolb-testbed bench controller-memory`). Not fewer:
/// the scheduler releases what it was given on its timer's next millisecond tick, so each
/// batch costs about 1 ms (with 64, that cold start took 1 s longer to reconcile; with
/// 1024, 0.5 s less than with all at once).
pub const IN_FLIGHT: usize = 1024;

/// A first-in first-out set of Services to reconcile, with one consumer.
#[derive(Debug, Default)]
pub struct WorkQueue {
    inner: Mutex<Inner>,
    ready: Notify,
}

/// Each Service by its key, one allocation shared by the order and the set (and with the
/// allocator when it comes from there): a cold start queues every Service. A reference
/// is made only when the Service is handed out.
#[derive(Debug, Default)]
struct Inner {
    order: VecDeque<ServiceKey>,
    queued: HashSet<ServiceKey>,
    /// Handed out, reconcile not started; true when queued again meanwhile.
    handed: HashMap<ServiceKey, bool>,
}

impl Inner {
    fn queue(&mut self, svc: ServiceKey) {
        self.queued.insert(svc.clone());
        self.order.push_back(svc);
    }
}

impl WorkQueue {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `svc` unless it is already waiting. A Service handed out and not yet
    /// started is queued again once it starts: the reconcile may have read it already.
    pub fn push(&self, svc: ServiceKey) {
        let mut q = self.lock();
        if q.queued.contains(&svc) {
            return;
        }
        if let Some(again) = q.handed.get_mut(&svc) {
            *again = true;
            return;
        }
        q.queue(svc);
        drop(q);
        self.ready.notify_one();
    }

    /// The reconcile of `svc` has started (or the applier found it gone): its slot is
    /// free, and it is queued again if it changed after it was handed out.
    pub fn started(&self, svc: &ServiceKey) {
        let mut q = self.lock();
        let Some((svc, again)) = q.handed.remove_entry(svc) else { return };
        let requeued = again && !q.queued.contains(&svc);
        if requeued {
            q.queue(svc);
        }
        // Otherwise half the slots free before the consumer is woken: it then takes a
        // batch (see [`IN_FLIGHT`]).
        let wake = requeued || q.handed.len() <= IN_FLIGHT / 2;
        drop(q);
        if wake {
            self.ready.notify_one();
        }
    }

    /// How many Services wait (not counting those handed out).
    pub fn len(&self) -> usize {
        self.lock().order.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn pop(&self) -> Option<ObjectRef<CachedService>> {
        let mut q = self.lock();
        if q.handed.len() >= IN_FLIGHT {
            return None;
        }
        let svc = q.order.pop_front()?;
        q.queued.remove(&svc);
        let out = model::service_ref(&svc);
        q.handed.insert(svc, false);
        Some(out)
    }

    /// The queued Services in order, at most [`IN_FLIGHT`] not yet started, waiting for
    /// more (or for a start) otherwise; for the one consumer.
    pub fn stream(self: Arc<Self>) -> impl Stream<Item = ObjectRef<CachedService>> + Send {
        futures::stream::unfold(self, |q| async move {
            loop {
                if let Some(svc) = q.pop() {
                    return Some((svc, q));
                }
                // A wake-up between `pop` and here leaves a permit: none is lost.
                q.ready.notified().await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use futures::StreamExt;

    fn svc(name: &str) -> ServiceKey {
        ServiceKey::new("default", name)
    }

    fn handed(name: &str) -> Option<ObjectRef<CachedService>> {
        Some(ObjectRef::new(name).within("default"))
    }

    #[tokio::test]
    async fn a_service_queued_many_times_waits_once_in_first_come_order() {
        let q = Arc::new(WorkQueue::default());
        for _ in 0..10_000 {
            q.push(svc("a"));
            q.push(svc("b"));
        }
        assert_eq!(q.len(), 2);
        let mut s = Box::pin(q.clone().stream());
        assert_eq!(s.next().await, handed("a"));
        // Taken out and started, it may be queued again (a change during its reconcile).
        q.started(&svc("a"));
        q.push(svc("a"));
        assert_eq!(s.next().await, handed("b"));
        assert_eq!(s.next().await, handed("a"));
        assert!(q.is_empty());
        let waiting = tokio::spawn(async move { s.next().await });
        tokio::task::yield_now().await;
        q.push(svc("c"));
        assert_eq!(waiting.await.unwrap(), handed("c"));
    }

    #[tokio::test]
    async fn at_most_in_flight_wait_unstarted_and_a_change_before_the_start_is_not_lost() {
        use futures::FutureExt;
        let q = Arc::new(WorkQueue::default());
        let name = |i: usize| format!("s{i}");
        for i in 0..=IN_FLIGHT {
            q.push(svc(&name(i)));
        }
        let mut s = Box::pin(q.clone().stream());
        for i in 0..IN_FLIGHT {
            assert_eq!(s.next().await, handed(&name(i)));
        }
        // The limit: the last one waits until reconciles start.
        assert_eq!(s.next().now_or_never(), None);
        assert_eq!(q.len(), 1);
        // s0 changes after it was handed out: not queued twice, but not forgotten either.
        q.push(svc("s0"));
        assert_eq!(q.len(), 1);
        q.started(&svc("s0"));
        assert_eq!(q.len(), 2, "s0 queued again when its (possibly stale) reconcile started");
        // Its slot is free, and the consumer woken for it.
        assert_eq!(s.next().await, handed(&name(IN_FLIGHT)));
        assert_eq!(s.next().now_or_never(), None);
        // One that was not handed out (the applier's own retry) frees no slot.
        q.started(&svc("elsewhere"));
        // Plain starts wake the consumer once half the slots are free: it takes a batch.
        for i in 1..=IN_FLIGHT / 2 {
            assert_eq!(s.next().now_or_never(), None, "woken with {i} started");
            q.started(&svc(&name(i)));
        }
        assert_eq!(s.next().await, handed("s0"));
        assert!(q.is_empty());
        assert_eq!(s.next().now_or_never(), None);
        // A Service started without a change meanwhile is not queued again.
        q.started(&svc(&name(IN_FLIGHT - 1)));
        assert!(q.is_empty());
    }
}
