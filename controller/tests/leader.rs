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
    let state = |r: &common::Running| (r.is_leader(), r.health.is_ready(), r.is_finished());
    let why = format!(
        "(leading, ready, finished): leader {:?}, standby {:?}; lease holder {:?}",
        state(&leader),
        state(&standby),
        holder(&client).await
    );
    assert!(!standby.is_leader(), "the standby leads: {why}");
    assert!(standby.health.is_ready(), "the standby is not ready: {why}");
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
/// read, so exactly one wins and the other sees a 409 and follows. (Simulated time: each
/// must first see the abandoned Lease unchanged for its duration by its own clock.)
#[tokio::test(start_paused = true)]
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
        let (mut a, mut b) = (elector("a"), elector("b"));
        let (ra, rb) = tokio::join!(a.step(), b.step());
        let gone = Step::Following("gone".into());
        assert_eq!(
            (ra.unwrap(), rb.unwrap()),
            (gone.clone(), gone),
            "round {round}: a fresh candidate waits"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
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

/// The leader is cut off from the apiserver — its requests hang, its Lease renewal among
/// them — while the standby is served and both still see every Service change (open watches
/// keep streaming). The standby takes over; the fake's request log, which orders every
/// request of both on one counter, shows the old leader sent its last write before the
/// standby's acquiring write, through Service churn before, during and after the takeover;
/// and no address is held twice at the end, after the old leader's network is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_requests_hang_stops_writing_before_the_standby_takes_over() {
    use ferrolb_fakeapi::{FakeApiServer, LoggedRequest, Verb};
    use k8s_openapi::api::core::v1::Service;
    use kube::api::{DeleteParams, ListParams};

    let (client, server) = cluster_on(FakeApiServer::new().with_request_log()).await;
    create_pool(&client, pool("lan", &["192.0.2.0/27"])).await;
    let lease = Duration::from_secs(3);
    let a = start(&server, settings("a", Some(lease)));
    let b = start(&server, settings("b", Some(lease)));
    let old = until("one replica holds the lease", || async { holder(&client).await }).await;
    let (leader, standby, new) = if old == "a" { (a, b, "b") } else { (b, a, "a") };
    until("the holder leads", || async { leader.is_leader().then_some(()) }).await;
    for i in 0..4 {
        svc("default", &format!("before-{i}")).create(&client).await;
        addresses(&client, "default", &format!("before-{i}")).await;
    }

    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let delete = |name: String| {
        let services = services.clone();
        async move { services.delete(&name, &DeleteParams::default()).await.unwrap() }
    };
    let status_write_by = |log: &[LoggedRequest], who: &str, name: &str| {
        log.iter().any(|r| {
            r.client.as_deref() == Some(who)
                && r.verb == Some(Verb::Patch)
                && r.path == format!("/api/v1/namespaces/default/services/{name}/status")
        })
    };

    server.set_hanging_for(&old, true);
    // While its term runs the old leader still allocates: its writes go out, and hang.
    for i in 0..3 {
        let name = format!("during-{i}");
        svc("default", &name).create(&client).await;
        until("the old leader sends its write, or its term ends", || async {
            (status_write_by(&server.request_log(), &old, &name) || !leader.is_leader()).then_some(())
        })
        .await;
    }
    delete("before-0".into()).await;
    until("the old leader steps down, or the standby took over", || async {
        (!leader.is_leader() || standby.is_leader()).then_some(())
    })
    .await;
    for i in 0..2 {
        svc("default", &format!("between-{i}")).create(&client).await;
    }
    delete("during-0".into()).await;
    until("the standby takes over", || async { standby.is_leader().then_some(()) }).await;
    for i in 0..3 {
        svc("default", &format!("after-{i}")).create(&client).await;
    }
    delete("before-1".into()).await;
    let live: Vec<String> = ["before-2", "before-3", "during-1", "during-2", "between-0", "between-1"]
        .into_iter()
        .map(String::from)
        .chain((0..3).map(|i| format!("after-{i}")))
        .collect();
    for name in &live {
        addresses(&client, "default", name).await;
    }

    // The allocation log.
    let check = |log: &[LoggedRequest]| {
        let lease_path = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/ferrolb-controller");
        let acquired = log
            .iter()
            .find(|r| {
                r.client.as_deref() == Some(new) && r.is_write() && r.path == lease_path && r.succeeded()
            })
            .expect("the standby's acquiring write");
        let acquired_at = acquired.answered.unwrap().0;
        let by_old: Vec<&LoggedRequest> =
            log.iter().filter(|r| r.client.as_deref() == Some(old.as_str()) && r.is_write()).collect();
        let last_sent = by_old.iter().map(|r| r.sent).max().unwrap();
        assert!(
            last_sent < acquired.sent,
            "the old leader sent a write (#{last_sent}) after the standby began acquiring (#{}): {:#?}",
            acquired.sent,
            by_old.iter().filter(|r| r.sent > acquired.sent).collect::<Vec<_>>()
        );
        for r in &by_old {
            assert!(
                r.answered.is_none_or(|(at, _)| at < acquired_at),
                "a write of the old leader landed after the standby acquired: {r:?}"
            );
        }
        let first_new = log
            .iter()
            .filter(|r| r.client.as_deref() == Some(new) && r.is_write() && r.path.contains("/services/"))
            .map(|r| r.sent)
            .min()
            .unwrap();
        assert!(acquired_at < first_new);
        // The scenario did what it says: the old leader had writes in flight when cut off.
        assert!(by_old.iter().any(|r| r.answered.is_none() && r.path.contains("/services/")), "{by_old:#?}");
    };
    check(&server.request_log());

    // The old leader is done (its release gets no answer either); then its network returns.
    until("the old leader's run() returns", || async { leader.is_finished().then_some(()) }).await;
    assert!(matches!(leader.stop().await, Err(ferrolb_controller::Error::LostLeadership)));
    server.set_hanging_for(&old, false);
    check(&server.request_log());
    let all = services.list(&ListParams::default()).await.unwrap().items;
    let mut seen = std::collections::BTreeMap::new();
    for s in &all {
        for ip in ingress(s) {
            let name = s.metadata.name.clone().unwrap();
            if let Some(other) = seen.insert(ip.clone(), name.clone()) {
                panic!("{ip} is held by both {other} and {name}");
            }
        }
    }
    let named: Vec<String> = all.iter().filter_map(|s| s.metadata.name.clone()).collect();
    assert_eq!(named.len(), live.len(), "{named:?}");
    assert_eq!(seen.len(), live.len(), "one address each: {seen:?}");
    standby.stop().await.unwrap();
}
