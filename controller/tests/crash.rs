//! Crash consistency: the controller is killed at random points during a churn of 1,000
//! Services and restarted on the same apiserver each time. At the end no address is held
//! twice (except legitimately shared), none is leaked, and every eligible Service has one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::*;
use ferrolb_api::ANNOTATION_ALLOW_SHARED_IP;
use ferrolb_testkit::rng::Rng;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

const NAMESPACES: [&str; 2] = ["churn-a", "churn-b"];

fn random_service(rng: &mut Rng, ns: &str, name: &str) -> Svc {
    let mut s = svc(ns, name);
    s = match rng.below(20) {
        0..=11 => s,
        12 | 13 => s.families("SingleStack", &["IPv6"]),
        14..=16 => s.families("PreferDualStack", &["IPv4", "IPv6"]),
        _ => s.families("RequireDualStack", &["IPv6", "IPv4"]),
    };
    if rng.below(10) == 0 {
        s = s.cluster_ip();
    }
    if rng.below(8) == 0 {
        // Few keys and few ports: both sharing and port clashes happen.
        let key = format!("k{}", rng.below(3));
        s = s.annot(ANNOTATION_ALLOW_SHARED_IP, &key).ports(&[1000 + rng.below(4) as u16]);
    }
    s
}

fn random_update(rng: &mut Rng) -> serde_json::Value {
    match rng.below(5) {
        0 => json!({"spec": {"type": "ClusterIP"}}),
        1 => json!({"spec": {"type": "LoadBalancer"}}),
        2 => json!({"spec": {"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"]}}),
        3 => json!({"spec": {"ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv4"]}}),
        _ => json!({"metadata": {"annotations": {ANNOTATION_ALLOW_SHARED_IP: format!("k{}", rng.below(3))}}}),
    }
}

fn ports(s: &Service) -> BTreeSet<(String, i32)> {
    s.spec
        .iter()
        .flat_map(|sp| sp.ports.iter().flatten())
        .map(|p| (p.protocol.clone().unwrap_or_else(|| "TCP".into()), p.port))
        .collect()
}

/// Everything wrong with the final state; empty when converged.
async fn problems(client: &kube::Client) -> Vec<String> {
    let mut out = Vec::new();
    let mut holders: BTreeMap<String, Vec<Service>> = BTreeMap::new();
    for ns in NAMESPACES {
        let list = Api::<Service>::namespaced(client.clone(), ns).list(&ListParams::default()).await.unwrap();
        for s in list.items {
            let ips = ingress(&s);
            let spec = s.spec.clone().unwrap_or_default();
            let id = format!("{ns}/{}", s.name_any());
            let fam = |ip: &String| if ip.contains(':') { "IPv6" } else { "IPv4" };
            if spec.type_.as_deref() == Some("LoadBalancer") {
                let families: Vec<&str> = ips.iter().map(fam).collect();
                let primary =
                    spec.ip_families.as_ref().and_then(|f| f.first()).map_or("IPv4", String::as_str);
                let ok = match spec.ip_family_policy.as_deref() {
                    Some("RequireDualStack") => families.len() == 2 && families[0] != families[1],
                    Some("PreferDualStack") => {
                        !families.is_empty()
                            && families.len() <= 2
                            && (families.len() == 1 || families[0] != families[1])
                    }
                    _ => families == [primary],
                };
                if !ok {
                    out.push(format!(
                        "{id}: addresses {ips:?} do not fit {:?} {primary}",
                        spec.ip_family_policy
                    ));
                }
            } else if !ips.is_empty() {
                out.push(format!("{id}: not a LoadBalancer but status lists {ips:?}"));
            }
            for ip in ips {
                holders.entry(ip).or_default().push(s.clone());
            }
        }
    }
    for (ip, hs) in &holders {
        for (i, a) in hs.iter().enumerate() {
            for b in &hs[i + 1..] {
                let ka = a.annotations().get(ANNOTATION_ALLOW_SHARED_IP);
                let kb = b.annotations().get(ANNOTATION_ALLOW_SHARED_IP);
                let clash = !ports(a).is_disjoint(&ports(b));
                if ka.is_none() || ka != kb || clash {
                    out.push(format!("{ip} held twice: {} and {}", a.name_any(), b.name_any()));
                }
            }
        }
    }
    let v4 = holders.keys().filter(|ip| !ip.contains(':')).count() as i64;
    let v6 = holders.keys().filter(|ip| ip.contains(':')).count() as i64;
    let st = pool_status(client, "churn").await;
    if (st.assigned_ipv4, st.assigned_ipv6) != (v4, v6) {
        out.push(format!(
            "pool status says {}+{} assigned, Services hold {v4}+{v6} (leak or stale count)",
            st.assigned_ipv4, st.assigned_ipv6
        ));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_random_points_during_churn_of_1000_services() {
    let seed = std::env::var("FERROLB_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
    });
    println!("crash test seed: {seed} (rerun with FERROLB_CRASH_SEED={seed})");
    let mut rng = Rng::new(seed);
    let started = Instant::now();

    let (client, server) = cluster().await;
    create_pool(&client, pool("churn", &["198.18.0.0/22", "2001:db8:1::/118"])).await;
    for ns in NAMESPACES {
        namespace(&client, ns, &[]).await;
    }
    let mut ctl = start(&server, settings("c", None));
    let mut live: Vec<(String, String)> = Vec::new();
    let (mut created, mut ops, mut restarts) = (0usize, 0usize, 0usize);
    let mut next_kill = 20 + rng.below(100) as usize;
    while created < 1000 {
        let roll = rng.below(100);
        if roll < 55 || live.is_empty() {
            let ns = *rng.pick(&NAMESPACES);
            let name = format!("s{created}");
            random_service(&mut rng, ns, &name).create(&client).await;
            live.push((ns.to_owned(), name));
            created += 1;
        } else if roll < 80 {
            let (ns, name) = rng.pick(&live).clone();
            let api: Api<Service> = Api::namespaced(client.clone(), &ns);
            api.patch(&name, &PatchParams::default(), &Patch::Merge(random_update(&mut rng))).await.unwrap();
        } else if roll < 97 {
            let i = rng.index(live.len());
            let (ns, name) = live.swap_remove(i);
            Api::<Service>::namespaced(client.clone(), &ns)
                .delete(&name, &DeleteParams::default())
                .await
                .unwrap();
        } else {
            // A manual edit: copy one Service's status onto another, a duplicate to resolve.
            let (ns_a, a) = rng.pick(&live).clone();
            let (ns_b, b) = rng.pick(&live).clone();
            let from = get_svc(&client, &ns_a, &a).await;
            if let Some(status) = from.status.filter(|_| a != b) {
                let api: Api<Service> = Api::namespaced(client.clone(), &ns_b);
                let patch = json!({"status": {"loadBalancer": status.load_balancer}});
                api.patch_status(&b, &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
            }
        }
        ops += 1;
        if ops % 200 == 0 {
            println!("{ops} ops after {:?}", started.elapsed());
        }
        if ops == next_kill {
            // Let it run a random moment, then kill it wherever it is and start afresh.
            tokio::time::sleep(Duration::from_millis(rng.below(40))).await;
            ctl.kill().await;
            restarts += 1;
            ctl = start(&server, settings("c", None));
            next_kill = ops + 20 + rng.below(100) as usize;
        }
    }
    let churned = started.elapsed();

    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let p = problems(&client).await;
        if p.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            let dead = ctl.is_finished();
            panic!(
                "seed {seed}: controller finished: {dead}; not converged; {} problems, first: {:#?}",
                p.len(),
                &p[..p.len().min(10)]
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "seed {seed}: {ops} operations on {created} Services, {restarts} kills, {} live at the end; churn {churned:?}, converged after {:?}",
        live.len(),
        started.elapsed() - churned
    );
    ctl.stop().await.unwrap();
}
