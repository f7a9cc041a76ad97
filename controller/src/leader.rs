//! Leader election on a coordination.k8s.io Lease: a pure decision over (what this replica
//! observed of the Lease and when, now, identity), and a thin driver that reads and writes it.
//!
//! **Expiry is judged by the follower's own clock.** A follower takes the Lease once it has
//! seen it unchanged for `leaseDurationSeconds` by its own monotonic clock, counted from when
//! it last saw it change (holder, renewTime, resourceVersion, ...), as client-go's
//! leaderelection does (`observedTime`). The holder's `renewTime` is never compared with the
//! local clock, so clock skew between replicas cannot make a standby take over early (nor
//! late). The price: a replica that has just started waits a whole lease duration before it
//! takes over a Lease that was abandoned long ago (a released one, holder cleared, at once).
//!
//! **A leader stops writing before the Lease can expire elsewhere.** Its term ends
//! `renewDeadline` (2/3 of the lease duration) after the *start* of its last successful
//! renewal round, i.e. before that round's write was sent. Every follower saw the write after
//! it was sent, so none takes over before `sent + leaseDuration`. The work's API writes go
//! through the term's fence (`fence.rs`): none is sent once the term ended, and one still in
//! flight is abandoned. The margin, `leaseDuration - renewDeadline` = 1/3 of the lease
//! duration (5 s of the default 15 s), is for a request admitted just before the term ends to
//! reach the apiserver, and for the replicas' clocks running at slightly different rates.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::error::CallError;
use crate::fence::{Term, within};

/// What the Lease says, as far as the decision cares. Two reads that differ in any field
/// are a change, and restart a follower's count.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseRecord {
    /// `spec.holderIdentity`; `None` or empty when released.
    pub holder: Option<String>,
    /// `spec.renewTime`: only ever compared with an earlier read, never with a clock.
    pub renew_time: Option<Timestamp>,
    /// `spec.leaseDurationSeconds`.
    pub duration: Duration,
    /// `spec.leaseTransitions`.
    pub transitions: i32,
    /// `metadata.resourceVersion`: every write changes it, renewals included.
    pub resource_version: Option<String>,
}

/// A Lease as this replica last saw it change, and when, by its own monotonic clock
/// (client-go's `observedRecord` and `observedTime`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// What the Lease said.
    pub record: LeaseRecord,
    /// When this replica first saw it say so.
    pub since: Instant,
}

impl Observed {
    /// What is known after reading `record` at `now`: the clock restarts only when the
    /// Lease changed since the previous observation.
    pub fn update(previous: Option<Observed>, record: LeaseRecord, now: Instant) -> Observed {
        match previous {
            Some(p) if p.record == record => p,
            _ => Observed { record, since: now },
        }
    }
}

/// What to do with the Lease now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// There is no Lease: create it, holding it.
    Create,
    /// We hold it: write a fresh renewTime.
    Renew,
    /// It is free or expired: take it (one more transition).
    Acquire,
    /// Someone else holds it, until `expires` by our clock unless we see it change: wait.
    Follow {
        /// The current holder.
        holder: String,
        /// When it expires unless it changes before.
        expires: Instant,
    },
}

/// The election decision: pure, so every case is unit-tested without a clock or an API.
/// `lease` is what this replica observed (`None`: there is no Lease).
pub fn decide(lease: Option<&Observed>, now: Instant, me: &str) -> Decision {
    let Some(lease) = lease else {
        return Decision::Create;
    };
    let holder = lease.record.holder.as_deref().filter(|h| !h.is_empty());
    match holder {
        None => Decision::Acquire,
        Some(h) if h == me => Decision::Renew,
        Some(h) => {
            let expires = lease.since.checked_add(lease.record.duration).unwrap_or(lease.since);
            if expires <= now {
                Decision::Acquire
            } else {
                Decision::Follow { holder: h.to_owned(), expires }
            }
        }
    }
}

/// Reads the decision inputs from a Lease object.
pub fn record(lease: &Lease) -> LeaseRecord {
    let spec = lease.spec.clone().unwrap_or_default();
    LeaseRecord {
        holder: spec.holder_identity,
        renew_time: spec.renew_time.map(|t| t.0),
        duration: Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0)),
        transitions: spec.lease_transitions.unwrap_or(0),
        resource_version: lease.metadata.resource_version.clone(),
    }
}

/// Election settings.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Lease namespace.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// Our identity (pod name).
    pub identity: String,
    /// How long a holder keeps the lease without renewing (whole seconds, at least 1).
    pub duration: Duration,
    /// How often to renew or retry.
    pub retry: Duration,
}

impl LeaseConfig {
    /// The lease duration as written to the Lease: whole seconds, at least one.
    pub fn lease_duration(&self) -> Duration {
        Duration::from_secs(self.duration.as_secs().max(1))
    }

    /// The renew deadline: how long a leader keeps its term without a successful renewal,
    /// 2/3 of the lease duration, so strictly less than it (see the module doc for the margin).
    pub fn renew_deadline(&self) -> Duration {
        self.lease_duration() * 2 / 3
    }
}

/// The driver: reads and writes the Lease per [`decide`].
pub struct Elector {
    api: Api<Lease>,
    cfg: LeaseConfig,
    /// The Lease as last seen changing (None before the first read, or while there is none).
    observed: Option<Observed>,
}

/// Whether one step left us holding the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// We hold the lease until at least now + duration.
    Leading,
    /// Someone else holds it.
    Following(String),
}

impl Elector {
    /// An elector for one Lease.
    pub fn new(client: kube::Client, cfg: LeaseConfig) -> Self {
        Elector { api: Api::namespaced(client, &cfg.namespace), cfg, observed: None }
    }

    /// The settings.
    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    /// One round: read the Lease, decide, write. A 409 means another replica wrote first.
    pub async fn step(&mut self) -> Result<Step, kube::Error> {
        let current = self.api.get_opt(&self.cfg.name).await?;
        let seen = Instant::now();
        self.observed = current.as_ref().map(|l| Observed::update(self.observed.take(), record(l), seen));
        let decision = decide(self.observed.as_ref(), seen, &self.cfg.identity);
        let now = Timestamp::now();
        let secs = i32::try_from(self.cfg.lease_duration().as_secs()).unwrap_or(i32::MAX);
        let result = match decision {
            Decision::Follow { holder, .. } => return Ok(Step::Following(holder)),
            Decision::Create => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.cfg.name.clone()),
                        namespace: Some(self.cfg.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.cfg.identity.clone()),
                        lease_duration_seconds: Some(secs),
                        acquire_time: Some(MicroTime(now)),
                        renew_time: Some(MicroTime(now)),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Decision::Renew | Decision::Acquire => {
                let Some(mut lease) = current else {
                    return Ok(Step::Following(String::new()));
                };
                let mut spec = lease.spec.take().unwrap_or_default();
                if decision == Decision::Acquire {
                    spec.acquire_time = Some(MicroTime(now));
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
                    spec.holder_identity = Some(self.cfg.identity.clone());
                    info!(lease = %self.cfg.name, identity = %self.cfg.identity, "acquiring the leader lease");
                }
                spec.renew_time = Some(MicroTime(now));
                spec.lease_duration_seconds = Some(secs);
                lease.spec = Some(spec);
                // PUT with the resourceVersion we read: a concurrent writer makes this a 409.
                self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await
            }
        };
        match result {
            Ok(written) => {
                self.observed =
                    Some(Observed::update(self.observed.take(), record(&written), Instant::now()));
                Ok(Step::Leading)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Step::Following(String::new())),
            Err(e) => Err(e),
        }
    }

    /// One [`Elector::step`] that gives up after `budget`. An apiserver that accepts the
    /// connection but never answers (frozen, or a partition after the request left) would
    /// otherwise hold the caller in the request for as long as it likes.
    async fn step_within(&mut self, budget: Duration) -> Result<Step, CallError> {
        within(budget, self.step()).await
    }

    /// Blocks until we hold the lease; returns the first term, which ends the renew deadline
    /// after the winning round began.
    pub async fn acquire(&mut self) -> Term {
        let mut last_holder = None;
        loop {
            let began = Instant::now();
            // Bounded like a renewal: a round that only succeeded long after it began would
            // leave us holding a Lease that has already expired.
            match self.step_within(self.cfg.renew_deadline()).await {
                Ok(Step::Leading) => {
                    info!(identity = %self.cfg.identity, "became leader");
                    return Term::until(began + self.cfg.renew_deadline());
                }
                Ok(Step::Following(h)) => {
                    if last_holder.as_ref() != Some(&h) && !h.is_empty() {
                        info!(leader = %h, "waiting for the leader lease");
                        last_holder = Some(h);
                    }
                }
                Err(e) => warn!(error = %e, "leader lease: cannot read or write the Lease"),
            }
            tokio::time::sleep(self.cfg.retry).await;
        }
    }

    /// Keeps renewing while we lead, extending `term` to the renew deadline after the start
    /// of each successful round; returns when leadership is lost: another holder, or the
    /// term's end, whatever the renewal in progress is doing then.
    pub async fn hold(&mut self, term: &Term) {
        let deadline = self.cfg.renew_deadline();
        let retry = self.cfg.retry;
        loop {
            let ends = term.ends();
            let round = async {
                tokio::time::sleep(retry).await;
                let began = Instant::now();
                (began, self.step().await)
            };
            tokio::select! {
                () = tokio::time::sleep_until(ends) => {
                    warn!(?deadline, "leader lease not renewed within the renew deadline; stepping down");
                    return;
                }
                (began, r) = round => match r {
                    // From when the round began: its write was sent no earlier.
                    Ok(Step::Leading) => term.extend(began + deadline),
                    Ok(Step::Following(h)) => {
                        warn!(leader = %h, "lost the leader lease to another replica");
                        return;
                    }
                    Err(e) => warn!(error = %e, "leader lease: renewal failed"),
                },
            }
        }
    }

    /// Gives the lease up (clean shutdown) so a standby takes over at once. Bounded by the
    /// renew deadline: an apiserver that does not answer must not keep the process from
    /// exiting (and restarting as a standby); the Lease then expires on its own.
    pub async fn release(&self) {
        let deadline = self.cfg.renew_deadline();
        if tokio::time::timeout(deadline, self.try_release()).await.is_err() {
            warn!(?deadline, "could not release the leader lease: no answer; it expires on its own");
        }
    }

    async fn try_release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        match self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await {
            Ok(_) => info!("released the leader lease"),
            Err(e) => warn!(error = %e, "could not release the leader lease; it expires on its own"),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Wall-clock time on the holder's clock, `s` seconds after some instant.
    fn wall(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// A Lease held by `by`, last renewed at `renewed` by its clock, at resourceVersion `rv`.
    fn held(by: &str, renewed: i64, rv: u64) -> LeaseRecord {
        LeaseRecord {
            holder: Some(by.into()),
            renew_time: Some(wall(renewed)),
            duration: secs(15),
            transitions: 3,
            resource_version: Some(rv.to_string()),
        }
    }

    /// Reads `records` in turn, one at each of the instants `at`.
    fn observe(reads: &[(LeaseRecord, Instant)]) -> Observed {
        reads.iter().fold(None, |prev, (r, at)| Some(Observed::update(prev, r.clone(), *at))).unwrap()
    }

    #[test]
    fn no_lease_is_created() {
        assert_eq!(decide(None, Instant::now(), "a"), Decision::Create);
    }

    #[test]
    fn own_lease_is_renewed_even_when_late() {
        let t0 = Instant::now();
        let o = observe(&[(held("a", 0, 1), t0)]);
        assert_eq!(decide(Some(&o), t0 + secs(5), "a"), Decision::Renew);
        assert_eq!(decide(Some(&o), t0 + secs(100), "a"), Decision::Renew);
    }

    #[test]
    fn a_lease_is_followed_until_seen_unchanged_for_its_duration() {
        let t0 = Instant::now();
        let o = observe(&[(held("b", 0, 1), t0)]);
        let follow = |expires| Decision::Follow { holder: "b".into(), expires };
        assert_eq!(decide(Some(&o), t0 + secs(14), "a"), follow(t0 + secs(15)));
        assert_eq!(decide(Some(&o), t0 + secs(15), "a"), Decision::Acquire);
        assert_eq!(decide(Some(&o), t0 + secs(60), "a"), Decision::Acquire);
        // The same Lease read again later does not restart the count; a renewal does.
        let again = observe(&[(held("b", 0, 1), t0), (held("b", 0, 1), t0 + secs(10))]);
        assert_eq!(again.since, t0);
        let renewed = observe(&[(held("b", 0, 1), t0), (held("b", 2, 2), t0 + secs(10))]);
        assert_eq!(decide(Some(&renewed), t0 + secs(15), "a"), follow(t0 + secs(25)));
    }

    #[test]
    fn the_holders_clock_is_never_compared_with_ours() {
        let t0 = Instant::now();
        // Holder's clock an hour behind ours: its renewals look long expired by our wall
        // clock, yet each one keeps it leader for a full duration from when we saw it.
        let behind = observe(&[(held("b", -3600, 1), t0), (held("b", -3598, 2), t0 + secs(2))]);
        assert_eq!(
            decide(Some(&behind), t0 + secs(16), "a"),
            Decision::Follow { holder: "b".into(), expires: t0 + secs(17) }
        );
        // An hour ahead: its renewTime is in our future, but once it stops renewing the
        // Lease expires a duration after we last saw it change, not an hour later.
        let ahead = observe(&[(held("b", 3600, 1), t0)]);
        assert_eq!(decide(Some(&ahead), t0 + secs(15), "a"), Decision::Acquire);
        // A renewTime that goes backwards is still a change.
        let back = observe(&[(held("b", 3600, 1), t0), (held("b", -3600, 2), t0 + secs(10))]);
        assert_eq!(back.since, t0 + secs(10));
    }

    #[test]
    fn any_change_restarts_the_count() {
        let t0 = Instant::now();
        let base = held("b", 0, 1);
        let changes = [
            LeaseRecord { resource_version: Some("2".into()), ..base.clone() },
            LeaseRecord { renew_time: Some(wall(1)), ..base.clone() },
            LeaseRecord { holder: Some("c".into()), ..base.clone() },
            LeaseRecord { transitions: 4, ..base.clone() },
            LeaseRecord { duration: secs(30), ..base.clone() },
        ];
        for changed in changes {
            let o = observe(&[(base.clone(), t0), (changed.clone(), t0 + secs(10))]);
            assert_eq!(o.since, t0 + secs(10), "{changed:?}");
        }
    }

    #[test]
    fn a_fresh_replica_waits_a_whole_duration_even_for_an_abandoned_lease() {
        let t0 = Instant::now();
        let long_ago = observe(&[(held("b", -1_000_000, 1), t0)]);
        assert!(matches!(decide(Some(&long_ago), t0 + secs(1), "a"), Decision::Follow { .. }));
        assert_eq!(decide(Some(&long_ago), t0 + secs(15), "a"), Decision::Acquire);
        // A Lease without renewTime is judged the same way.
        let never = observe(&[(LeaseRecord { renew_time: None, ..held("b", 0, 1) }, t0)]);
        assert!(matches!(decide(Some(&never), t0 + secs(1), "a"), Decision::Follow { .. }));
    }

    #[test]
    fn a_released_lease_is_free_at_once() {
        let t0 = Instant::now();
        for holder in [None, Some(String::new())] {
            let o = observe(&[(LeaseRecord { holder, ..held("b", 0, 1) }, t0)]);
            assert_eq!(decide(Some(&o), t0, "a"), Decision::Acquire);
        }
    }

    #[test]
    fn the_renew_deadline_leaves_a_third_of_the_lease_as_margin() {
        let cfg = |d| LeaseConfig {
            namespace: "ns".into(),
            name: "l".into(),
            identity: "a".into(),
            duration: d,
            retry: Duration::from_millis(200),
        };
        assert_eq!(cfg(secs(15)).renew_deadline(), secs(10));
        // What is written is whole seconds; the deadline follows what is written.
        let odd = cfg(Duration::from_millis(1500));
        assert_eq!((odd.lease_duration(), odd.renew_deadline()), (secs(1), secs(1) * 2 / 3));
        for d in [secs(1), secs(2), secs(15), secs(3600)] {
            let c = cfg(d);
            assert!(c.renew_deadline() < c.lease_duration());
        }
    }

    #[test]
    fn record_reads_the_spec() {
        let lease = Lease {
            metadata: ObjectMeta { resource_version: Some("7".into()), ..Default::default() },
            spec: Some(LeaseSpec {
                holder_identity: Some("b".into()),
                lease_duration_seconds: Some(7),
                renew_time: Some(MicroTime(wall(3))),
                lease_transitions: Some(2),
                ..Default::default()
            }),
        };
        assert_eq!(
            record(&lease),
            LeaseRecord {
                holder: Some("b".into()),
                renew_time: Some(wall(3)),
                duration: secs(7),
                transitions: 2,
                resource_version: Some("7".into()),
            }
        );
    }
}
