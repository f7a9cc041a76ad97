//! Leader election on a coordination.k8s.io Lease: a pure decision over (lease, now,
//! identity), and a thin driver that reads and writes the Lease.
//!
//! Expiry is judged from the Lease's own `renewTime` + `leaseDurationSeconds`, so replicas
//! need roughly synchronised clocks (as with any Lease-based election that reads renewTime);
//! the lease duration should exceed the expected clock skew by a wide margin.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use tokio::time::Instant;
use tracing::{info, warn};

/// What the Lease says, as far as the decision cares.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseRecord {
    /// `spec.holderIdentity`; `None` or empty when released.
    pub holder: Option<String>,
    /// `spec.renewTime`.
    pub renew_time: Option<Timestamp>,
    /// `spec.leaseDurationSeconds`.
    pub duration: Duration,
    /// `spec.leaseTransitions`.
    pub transitions: i32,
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
    /// Someone else holds it until `expires`: wait.
    Follow {
        /// The current holder.
        holder: String,
        /// When it expires unless renewed.
        expires: Timestamp,
    },
}

/// The election decision: pure, so every case is unit-tested without a clock or an API.
pub fn decide(lease: Option<&LeaseRecord>, now: Timestamp, me: &str) -> Decision {
    let Some(lease) = lease else {
        return Decision::Create;
    };
    let holder = lease.holder.as_deref().filter(|h| !h.is_empty());
    match holder {
        None => Decision::Acquire,
        Some(h) if h == me => Decision::Renew,
        Some(h) => {
            let span = SignedDuration::try_from(lease.duration).unwrap_or(SignedDuration::MAX);
            // No renewTime: treat as expired, a holder that never renewed holds nothing.
            let expires = lease.renew_time.and_then(|t| t.checked_add(span).ok()).unwrap_or(Timestamp::MIN);
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

/// The driver: reads and writes the Lease per [`decide`].
pub struct Elector {
    api: Api<Lease>,
    cfg: LeaseConfig,
}

/// Why a bounded round of the election failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The API refused or failed the request.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// The API did not answer in time.
    #[error("the API did not answer within {0:?}")]
    NoAnswer(Duration),
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
        Elector { api: Api::namespaced(client, &cfg.namespace), cfg }
    }

    /// The settings.
    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    /// One round: read the Lease, decide, write. A 409 means another replica wrote first.
    pub async fn step(&self) -> Result<Step, kube::Error> {
        let current = self.api.get_opt(&self.cfg.name).await?;
        let now = Timestamp::now();
        let rec = current.as_ref().map(record);
        let decision = decide(rec.as_ref(), now, &self.cfg.identity);
        let secs = i32::try_from(self.cfg.duration.as_secs().max(1)).unwrap_or(i32::MAX);
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
                self.api.create(&PostParams::default(), &lease).await.map(|_| ())
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
                self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await.map(|_| ())
            }
        };
        match result {
            Ok(()) => Ok(Step::Leading),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Step::Following(String::new())),
            Err(e) => Err(e),
        }
    }

    /// The renew deadline: how long a leader keeps leading without a successful renewal.
    pub fn renew_deadline(&self) -> Duration {
        self.cfg.duration * 2 / 3
    }

    /// One [`Elector::step`] that gives up after `budget`. An apiserver that accepts the
    /// connection but never answers (frozen, or a partition after the request left) would
    /// otherwise hold the caller in the request for as long as it likes.
    async fn step_within(&self, budget: Duration) -> Result<Step, StepError> {
        match tokio::time::timeout(budget, self.step()).await {
            Ok(r) => r.map_err(StepError::Api),
            Err(_) => Err(StepError::NoAnswer(budget)),
        }
    }

    /// Blocks until we hold the lease; returns when the winning round began, the instant
    /// [`Elector::hold`] counts the renew deadline from.
    pub async fn acquire(&self) -> Instant {
        let mut last_holder = None;
        loop {
            let began = Instant::now();
            // Bounded like a renewal: a round that only succeeded long after it began would
            // leave us holding a Lease that has already expired.
            match self.step_within(self.renew_deadline()).await {
                Ok(Step::Leading) => {
                    info!(identity = %self.cfg.identity, "became leader");
                    return began;
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

    /// Keeps renewing while we lead; returns when leadership is lost: another holder, or
    /// no successful renewal within the renew deadline (two thirds of the lease duration)
    /// counted from `since`, the start of the last successful round. Each round is cut
    /// off at the deadline, so a renewal that hangs cannot keep us leading past it.
    pub async fn hold(&self, since: Instant) {
        let deadline = self.renew_deadline();
        let mut last_ok = since;
        loop {
            tokio::time::sleep(self.cfg.retry).await;
            let budget = deadline.saturating_sub(last_ok.elapsed());
            if !budget.is_zero() {
                let began = Instant::now();
                match self.step_within(budget).await {
                    // From when the round began: the renewTime it wrote is no later than that.
                    Ok(Step::Leading) => last_ok = began,
                    Ok(Step::Following(h)) => {
                        warn!(leader = %h, "lost the leader lease to another replica");
                        return;
                    }
                    Err(e) => warn!(error = %e, "leader lease: renewal failed"),
                }
            }
            if last_ok.elapsed() >= deadline {
                warn!(?deadline, "leader lease not renewed within the renew deadline; stepping down");
                return;
            }
        }
    }

    /// Gives the lease up (clean shutdown) so a standby takes over at once. Bounded by the
    /// renew deadline: an apiserver that does not answer must not keep the process from
    /// exiting (and restarting as a standby); the Lease then expires on its own.
    pub async fn release(&self) {
        let deadline = self.renew_deadline();
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

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    fn held(by: &str, renewed: i64) -> LeaseRecord {
        LeaseRecord {
            holder: Some(by.into()),
            renew_time: Some(t(renewed)),
            duration: Duration::from_secs(15),
            transitions: 3,
        }
    }

    #[test]
    fn no_lease_is_created() {
        assert_eq!(decide(None, t(0), "a"), Decision::Create);
    }

    #[test]
    fn own_lease_is_renewed_even_when_late() {
        assert_eq!(decide(Some(&held("a", 0)), t(5), "a"), Decision::Renew);
        assert_eq!(decide(Some(&held("a", 0)), t(100), "a"), Decision::Renew);
    }

    #[test]
    fn live_lease_of_another_is_followed_until_it_expires() {
        let l = held("b", 0);
        assert_eq!(decide(Some(&l), t(14), "a"), Decision::Follow { holder: "b".into(), expires: t(15) });
        assert_eq!(decide(Some(&l), t(15), "a"), Decision::Acquire);
        assert_eq!(decide(Some(&l), t(60), "a"), Decision::Acquire);
    }

    #[test]
    fn released_or_never_renewed_lease_is_free() {
        let mut l = held("b", 0);
        l.holder = None;
        assert_eq!(decide(Some(&l), t(1), "a"), Decision::Acquire);
        l.holder = Some(String::new());
        assert_eq!(decide(Some(&l), t(1), "a"), Decision::Acquire);
        let mut l = held("b", 0);
        l.renew_time = None;
        assert_eq!(decide(Some(&l), t(1), "a"), Decision::Acquire);
    }

    #[test]
    fn record_reads_the_spec() {
        let lease = Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some("b".into()),
                lease_duration_seconds: Some(7),
                renew_time: Some(MicroTime(t(3))),
                lease_transitions: Some(2),
                ..Default::default()
            }),
            ..Default::default()
        };
        let r = record(&lease);
        assert_eq!(
            r,
            LeaseRecord {
                holder: Some("b".into()),
                renew_time: Some(t(3)),
                duration: Duration::from_secs(7),
                transitions: 2
            }
        );
        assert_eq!(decide(Some(&r), t(9), "a"), Decision::Follow { holder: "b".into(), expires: t(10) });
    }
}
