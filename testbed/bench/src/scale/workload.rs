//! The bench's objects: ferrolb's configuration, the Services and the fake pods behind
//! them (bound to kwok's Nodes, which make them Ready).

use ferrolb_api::ServiceAnnouncement;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::T;
use crate::whole_path::{create_service, lb_service};
use ferrolb_cluster::{Cluster, SERVICE_CIDRS, ferrolb};
use ferrolb_lab::Error;
use ferrolb_lab::speaker::yaml;

/// The namespace of the bench's timed and changed Services and their pods; the measured
/// ones are spread over [`namespace_of`]'s.
const NS: &str = "scale";
/// The measured Services in one namespace: within Kubernetes' scalability threshold of
/// 5 000 a namespace (sig-scalability `thresholds.md`). kube-controller-manager's
/// EndpointSlice controller lists every EndpointSlice of a Service's namespace at each
/// sync of that Service, so one namespace of 50 000 made the control plane, not ferrolb,
/// the quadratic part of the run.
const PER_NAMESPACE: usize = 1_000;
/// The address pool, in the benchmarking range (198.18.0.0/15): room for 50 176 Services.
const POOL: &[&str] = &["198.18.0.0/17", "198.18.128.0/18", "198.18.192.0/22"];
/// ClusterIPs beyond the cluster's default /20 (never routed: no kube-proxy runs), one
/// ServiceCIDR each (a ServiceCIDR holds one range per family): the rest of 198.18.0.0/16
/// and 198.19.0.0/17, below kwok's pod and node ranges (198.19.128.0/17) and the real
/// nodes' pods and the default ClusterIPs (198.19.224.0/19).
const EXTRA_SERVICE_CIDRS: &[&str] =
    &["198.19.0.0/17", "198.18.196.0/22", "198.18.200.0/21", "198.18.208.0/20", "198.18.224.0/19"];
/// Fake pods' addresses kwok has ([`ferrolb_cluster::kwok::FAKE_POD_V4`]: 16 382), with
/// room to spare.
const POD_ADDRESSES: usize = 16_000;
/// The pool of the L2Advertisement of `--l2`: no auto-assignment, and no Service asks
/// for it, so every Service still takes [`POOL`]'s addresses.
const L2_POOL: &str = "scale-l2";
/// Its addresses: a few of the lab's LAN, outside its L2 pool.
const L2_ADDRESSES: &str = "192.0.2.192/29";
/// Pods behind each Service when addresses allow.
const MAX_PODS_PER_SERVICE: usize = 3;
/// Services created at once; and Services whose pods are created at once.
const IN_FLIGHT: usize = 16;

/// The name of the `i`th measured Service (from 1).
pub(super) fn service_name(i: usize) -> String {
    format!("svc-{i:05}")
}

/// The namespace of Service `name`: [`PER_NAMESPACE`] measured Services each
/// ([`service_name`]), the others in [`NS`].
pub(super) fn namespace_of(name: &str) -> String {
    match name.strip_prefix("svc-").and_then(|i| i.parse::<usize>().ok()) {
        Some(i) => namespace(i.saturating_sub(1) / PER_NAMESPACE),
        None => NS.to_owned(),
    }
}

fn namespace(k: usize) -> String {
    format!("{NS}-{k:02}")
}

/// Every namespace of a run of `services` measured Services.
pub(super) fn namespaces(services: usize) -> impl Iterator<Item = String> {
    std::iter::once(NS.to_owned()).chain((0..services.div_ceil(PER_NAMESPACE)).map(namespace))
}

/// Whether `ns` is one of the bench's namespaces.
pub(super) fn is_benchs(ns: Option<&str>) -> bool {
    ns.is_some_and(|ns| ns == NS || ns.strip_prefix(NS).is_some_and(|k| k.starts_with('-')))
}

/// ferrolb's configuration and the bench's namespaces for `services` measured Services:
/// the pool, the router as a BGPPeer and the advertisement, more ClusterIPs; with `l2`, an
/// L2Advertisement of a pool of its own that no Service uses, which makes every speaker
/// watch every Node (as in a cluster that announces on L2) and changes nothing else.
pub(super) fn configuration(services: usize, l2: bool) -> String {
    let mut objects: Vec<String> = namespaces(services)
        .map(|ns| format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}}}\n"))
        .collect();
    objects.extend(EXTRA_SERVICE_CIDRS.iter().enumerate().map(|(i, cidr)| {
        format!(
            "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {{name: {}}}\nspec: {{cidrs: [\"{cidr}\"]}}\n",
            service_cidr_name(i)
        )
    }));
    objects.extend([
        yaml::pool("scale", POOL),
        yaml::router_peer_v4(&[]),
        yaml::bgp_advertisement("scale", &["ipAddressPools: [scale]"]),
    ]);
    if l2 {
        objects.extend([
            yaml::pool_manual(L2_POOL, &[L2_ADDRESSES]),
            yaml::l2_advertisement(L2_POOL, &[&format!("ipAddressPools: [{L2_POOL}]")]),
        ]);
    }
    yaml::stream(&objects)
}

fn service_cidr_name(i: usize) -> String {
    format!("scale-extra-{i}")
}

/// The most Services a run can make: as many as both the pool and the ClusterIPs hold
/// (each ServiceCIDR keeps its first and last address, the default one also the
/// `kubernetes` Service's).
pub(super) fn most_services() -> usize {
    let pool: u64 = POOL.iter().map(|c| v4_range(c).1).sum();
    let default_v4 = SERVICE_CIDRS.split(',').find(|c| !c.contains(':')).unwrap_or_default();
    let cluster_ips: u64 =
        EXTRA_SERVICE_CIDRS.iter().chain([&default_v4]).map(|c| v4_range(c).1 - 2).sum::<u64>() - 1;
    usize::try_from(pool.min(cluster_ips)).unwrap_or(usize::MAX)
}

/// The ranges this file hands out: the pool's and the extra ClusterIPs'.
#[cfg(test)]
pub(super) fn ranges() -> impl Iterator<Item = &'static str> {
    POOL.iter().chain(EXTRA_SERVICE_CIDRS).copied()
}

/// An IPv4 CIDR of this file as (first address, addresses).
pub(super) fn v4_range(cidr: &str) -> (u32, u64) {
    let (ip, len) = cidr.split_once('/').unwrap_or((cidr, "32"));
    let ip: std::net::Ipv4Addr = ip.parse().unwrap_or(std::net::Ipv4Addr::UNSPECIFIED);
    let len: u32 = len.parse().unwrap_or(32);
    (u32::from(ip), 1u64 << (32 - len.min(32)))
}

/// Waits until the extra ServiceCIDRs are Ready and each namespace of a run of
/// `services` has its default ServiceAccount (pods are refused without it).
pub(super) fn wait_ready(cluster: &Cluster, services: usize) -> Result<(), Error> {
    for i in 0..EXTRA_SERVICE_CIDRS.len() {
        ferrolb::wait_jsonpath(
            cluster,
            &["servicecidr", &service_cidr_name(i)],
            "{.status.conditions[?(@.type==\"Ready\")].status}",
            T,
            |s| s == "True",
        )?;
    }
    namespaces(services).try_for_each(|ns| {
        ferrolb::wait_jsonpath(
            cluster,
            &["serviceaccount", "default", "-n", &ns],
            "{.metadata.name}",
            T,
            |s| s == "default",
        )
        .map(drop)
    })
}

/// Creates and changes the bench's objects, as the admin.
pub(super) struct Workload<'a> {
    pub(super) cluster: &'a Cluster,
    pub(super) rt: &'a tokio::runtime::Runtime,
    client: kube::Client,
    /// In every namespace (the bench's are told by [`is_benchs`]).
    pub(super) services: Api<Service>,
    pub(super) slices: Api<EndpointSlice>,
    pub(super) announcements: Api<ServiceAnnouncement>,
    /// Fake pods behind each Service: [`MAX_PODS_PER_SERVICE`], fewer when kwok's
    /// addresses would not do for `services` Services (none beyond 16 000).
    pub(super) pods_per_service: usize,
}

impl<'a> Workload<'a> {
    /// For at most `services` Services in all.
    pub(super) fn new(
        cluster: &'a Cluster,
        rt: &'a tokio::runtime::Runtime,
        client: &kube::Client,
        services: usize,
    ) -> Self {
        Workload {
            cluster,
            rt,
            client: client.clone(),
            services: Api::all(client.clone()),
            slices: Api::all(client.clone()),
            announcements: Api::all(client.clone()),
            pods_per_service: (POD_ADDRESSES / services.max(1)).min(MAX_PODS_PER_SERVICE),
        }
    }

    /// Creates the pods of every Service of `names` (up to [`IN_FLIGHT`] Services' at
    /// once), then the Services ([`IN_FLIGHT`] at once).
    pub(super) fn create_many(&self, names: &[String]) -> Result<(), Error> {
        let chunk = names.len().div_ceil(IN_FLIGHT).max(1);
        std::thread::scope(|s| {
            let workers: Vec<_> = names
                .chunks(chunk)
                .map(|mine| s.spawn(move || mine.iter().try_for_each(|n| self.create_pods(n))))
                .collect();
            workers.into_iter().try_for_each(|w| {
                w.join().unwrap_or_else(|_| Err(Error::Thread("creating fake pods panicked".into())))
            })
        })?;
        self.rt.block_on(
            futures::stream::iter(names.iter().map(|n| create(self.services_of(n), n)))
                .buffer_unordered(IN_FLIGHT)
                .try_collect::<Vec<()>>(),
        )?;
        Ok(())
    }

    /// The fake pods Service `name` selects (`app=<name>`), bound to the first fake Nodes.
    pub(super) fn create_pods(&self, name: &str) -> Result<(), Error> {
        if self.pods_per_service > 0 {
            self.cluster.create_fake_pods(&namespace_of(name), name, self.pods_per_service)?;
        }
        Ok(())
    }

    /// Creates Service `name`.
    pub(super) fn create_service(&self, name: &str) -> Result<(), Error> {
        self.rt.block_on(create(self.services_of(name), name))
    }

    /// The Services of `name`'s namespace.
    fn services_of(&self, name: &str) -> Api<Service> {
        Api::namespaced(self.client.clone(), &namespace_of(name))
    }

    /// Sets Service `name`'s only port to `port` (same target port: the EndpointSlices
    /// do not change, only the Service).
    pub(super) fn patch_port(&self, name: &str, port: u16) -> Result<(), Error> {
        let patch = json!({"spec": {"ports": [{"port": port, "protocol": "TCP", "targetPort": "http"}]}});
        let ns = namespace_of(name);
        self.rt
            .block_on(self.services_of(name).patch(name, &PatchParams::default(), &Patch::Merge(&patch)))
            .map_err(|e| Error::Parse(format!("patching Service {ns}/{name}: spec.ports: {e}")))?;
        Ok(())
    }
}

/// Creates Service `name`: LoadBalancer (policy Cluster), selecting `app=<name>`.
async fn create(api: Api<Service>, name: &str) -> Result<(), Error> {
    create_service(&api, &lb_service(&namespace_of(name), name, true)?).await
}
