//! Two replicas on one Lease: one leads; the other takes over when the leader stops.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

async fn holder(client: &kube::Client) -> Option<String> {
    let lease = Api::<Lease>::namespaced(client.clone(), NS).get_opt("ferrolb-controller").await.unwrap()?;
    lease.spec?.holder_identity.filter(|h| !h.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_leader_and_takeover() {
    let (client, server) = cluster().await;
    create_pool(&client, pool("lan", &["192.0.2.0/28"])).await;
    let lease = Duration::from_secs(2);
    let a = start(&server, settings("a", Some(lease)));
    let b = start(&server, settings("b", Some(lease)));

    let first = until("one replica holds the lease", || async { holder(&client).await }).await;
    let (leader, standby) = if first == "a" { (a, b) } else { (b, a) };
    until("the holder leads and allocates", || async { leader.is_leader().then_some(()) }).await;
    svc("default", "one").create(&client).await;
    addresses(&client, "default", "one").await;
    // The standby is healthy, ready, and not leading (it never even started the watches).
    assert!(!standby.is_leader() && standby.health.is_ready());
    assert_eq!(holder(&client).await.as_deref(), Some(first.as_str()));

    // Crash of the leader: the lease expires and the standby takes over.
    let t = Instant::now();
    leader.kill().await;
    let second =
        until("the standby takes over", || async { holder(&client).await.filter(|h| *h != first) }).await;
    until("the new leader leads", || async { standby.is_leader().then_some(()) }).await;
    println!("takeover after a crash: {:?} (lease duration {lease:?})", t.elapsed());
    svc("default", "two").create(&client).await;
    let two = addresses(&client, "default", "two").await;
    assert_ne!(two, addresses(&client, "default", "one").await, "the new leader replayed the old address");

    // A clean stop releases the lease: a restarted replica takes over without waiting for expiry.
    let again = start(&server, settings(&first, Some(lease)));
    until("the restarted replica stands by", || async { again.health.is_ready().then_some(()) }).await;
    let t = Instant::now();
    standby.stop().await.unwrap();
    assert_ne!(holder(&client).await.as_deref(), Some(second.as_str()), "released on shutdown");
    until("the restarted replica takes over", || async { again.is_leader().then_some(()) }).await;
    println!("takeover after a clean stop: {:?}", t.elapsed());
    svc("default", "three").create(&client).await;
    assert_eq!(addresses(&client, "default", "three").await.len(), 1);
    again.stop().await.unwrap();
}

/// Two candidates racing for an expired lease: the write carries the resourceVersion they
/// read, so exactly one wins and the other sees a 409 and follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_candidates_cannot_both_acquire() {
    use ferrolb_controller::leader::{Elector, Step};
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    use k8s_openapi::jiff::Timestamp;
    use kube::api::PostParams;

    let (client, server) = cluster().await;
    for round in 0..20 {
        let name = format!("race-{round}");
        let stale = Lease {
            metadata: ObjectMeta { name: Some(name.clone()), ..Default::default() },
            spec: Some(LeaseSpec {
                holder_identity: Some("gone".into()),
                lease_duration_seconds: Some(1),
                renew_time: Some(MicroTime(Timestamp::from_second(1_000_000_000).unwrap())),
                ..Default::default()
            }),
        };
        Api::<Lease>::namespaced(client.clone(), NS).create(&PostParams::default(), &stale).await.unwrap();
        let elector = |id: &str| {
            let mut s = settings(id, Some(Duration::from_secs(5)));
            let mut cfg = s.leader.take().unwrap();
            cfg.name = name.clone();
            Elector::new(server.new_client(), cfg)
        };
        let (a, b) = (elector("a"), elector("b"));
        let (ra, rb) = tokio::join!(a.step(), b.step());
        let leading = [ra.unwrap(), rb.unwrap()].iter().filter(|s| **s == Step::Leading).count();
        assert_eq!(leading, 1, "round {round}: exactly one candidate acquires");
    }
}

/// An apiserver that stops answering (frozen, or cut off after the request left) must not
/// hold the leader in its renewal: it steps down within the renew deadline, before the
/// Lease can expire and a standby elsewhere take it, and the process ends (to restart as
/// a standby) even though releasing the Lease gets no answer either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewal_hangs_steps_down_before_its_lease_expires() {
    let (client, server) = cluster().await;
    let lease = Duration::from_secs(3);
    let leader = start(&server, settings("a", Some(lease)));
    until("a leads", || async { leader.is_leader().then_some(()) }).await;
    until("a holds the Lease", || async { (holder(&client).await.as_deref() == Some("a")).then_some(()) })
        .await;

    server.set_hanging(true);
    let t = Instant::now();
    until("a steps down", || async { (!leader.is_leader()).then_some(()) }).await;
    let stepped = t.elapsed();
    println!("stepped down {stepped:?} after the API stopped answering (lease {lease:?})");
    assert!(stepped < lease, "still leading {stepped:?} into a hung API: past its {lease:?} Lease");
    until("run() returns", || async { leader.is_finished().then_some(()) }).await;
    assert!(t.elapsed() < lease * 2, "run() took {:?} to return", t.elapsed());
    server.set_hanging(false);
    let result = leader.stop().await;
    assert!(matches!(result, Err(ferrolb_controller::Error::LostLeadership)), "{result:?}");
}
