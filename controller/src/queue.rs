//! The Services waiting for a reconcile, each at most once.
//!
//! Latest state wins: a reconcile reads the Service from the watch cache, never from the
//! queue, so a Service queued twice needs one reconcile, and the queue holds at most one
//! entry per Service. A channel would instead grow with every event: a relist queues
//! every Service, and each release re-queues every Service still waiting for an address,
//! so deleting 10 000 Services with 1 000 waiting for an address would queue ten million.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use futures::Stream;
use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::Notify;

/// A first-in first-out set of Services to reconcile, with one consumer.
#[derive(Debug, Default)]
pub struct WorkQueue {
    inner: Mutex<Inner>,
    ready: Notify,
}

/// Each reference once, shared by the order and the set: a cold start queues every
/// Service (with 100k of them, held twice, 18 MiB more at ready).
#[derive(Debug, Default)]
struct Inner {
    order: VecDeque<Arc<ObjectRef<Service>>>,
    queued: HashSet<Arc<ObjectRef<Service>>>,
}

impl WorkQueue {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `svc` unless it is already waiting.
    pub fn push(&self, svc: ObjectRef<Service>) {
        let mut q = self.lock();
        if q.queued.contains(&svc) {
            return;
        }
        let svc = Arc::new(svc);
        q.queued.insert(svc.clone());
        q.order.push_back(svc);
        drop(q);
        self.ready.notify_one();
    }

    /// How many Services wait.
    pub fn len(&self) -> usize {
        self.lock().order.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn pop(&self) -> Option<ObjectRef<Service>> {
        let mut q = self.lock();
        let svc = q.order.pop_front()?;
        q.queued.remove(&svc);
        // The set's copy is gone: the reference is this one's alone, nothing is copied.
        Some(Arc::unwrap_or_clone(svc))
    }

    /// The queued Services in order, waiting for more when empty; for the one consumer.
    pub fn stream(self: Arc<Self>) -> impl Stream<Item = ObjectRef<Service>> + Send {
        futures::stream::unfold(self, |q| async move {
            loop {
                if let Some(svc) = q.pop() {
                    return Some((svc, q));
                }
                // A push between `pop` and here leaves a permit: no wake-up is lost.
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

    fn svc(name: &str) -> ObjectRef<Service> {
        ObjectRef::new(name).within("default")
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
        assert_eq!(s.next().await, Some(svc("a")));
        // Taken out, it may be queued again (a change during its reconcile).
        q.push(svc("a"));
        assert_eq!(s.next().await, Some(svc("b")));
        assert_eq!(s.next().await, Some(svc("a")));
        assert!(q.is_empty());
        let waiting = tokio::spawn(async move { s.next().await });
        tokio::task::yield_now().await;
        q.push(svc("c"));
        assert_eq!(waiting.await.unwrap(), Some(svc("c")));
    }
}
