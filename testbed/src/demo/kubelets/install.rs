//! ferrolb installed from `manifests/` on the real kubelets: the speaker DaemonSet and
//! the controller Deployment as shipped, a backend Deployment, and LoadBalancer Services
//! of the L2 and the BGP pool that the client reaches.

use std::net::IpAddr;
use std::time::Instant;

use super::{IMAGE, NODES, T, check, first_v4, kubectl_json, reach, wait_ingress};
use crate::demo::Timeline;
use ferrolb_cluster::{Cluster, ferrolb, helm};
use ferrolb_lab::routers::{self, Bird};
use ferrolb_lab::speaker::yaml;
use ferrolb_lab::{Error, Lab, addressing};

/// Where the backend's process reads its static config (how the lab finds the process).
pub(super) const BACKEND_CONFIG: &str = "/etc/web/static.yaml";

/// The Services' backend: a Deployment of ferrolb's image whose one process serves HTTP
/// on the pod network (a speaker in static mode with nothing to announce: its /metrics).
fn backend() -> String {
    let node = yaml::node(1).replace('\n', "\n    ");
    format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata: {{name: web-static, namespace: default}}
data:
  static.yaml: |
    {node}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: default}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      automountServiceAccountToken: false
      containers:
      - name: web
        image: {IMAGE}
        command: [/usr/local/bin/ferrolb-speaker]
        args: [--node-name, node1, --static, {BACKEND_CONFIG}, --metrics-addr, "0.0.0.0:8080"]
        ports: [{{containerPort: 8080}}]
        # A CPU request, as a production backend has: BestEffort, on a busy node it got
        # so little CPU that its accept queue (128) overflowed under the client's probes.
        resources: {{requests: {{cpu: 100m, memory: 32Mi}}}}
        readinessProbe:
          httpGet: {{path: /readyz, port: 8080}}
          periodSeconds: 1
        volumeMounts: [{{name: static, mountPath: /etc/web}}]
      volumes: [{{name: static, configMap: {{name: web-static}}}}]
"#
    )
}

/// BGP to the router (the L2 pool comes from manifests/examples/l2.yaml) and two
/// Services of policy Cluster, one per pool: every node may carry their traffic, so a
/// speaker leaving hands its part over rather than taking it down.
fn bgp_and_services() -> String {
    let service = |name: &str, pool: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: default\n  annotations:\n    \
             ferrolb.io/address-pool: {pool}\nspec:\n  type: LoadBalancer\n  selector: {{app: web}}\n  \
             ports: [{{port: 80, targetPort: 8080, protocol: TCP}}]\n"
        )
    };
    yaml::stream(&[
        yaml::pool("public", &[addressing::BGP_POOL_V4]),
        yaml::peer("router", addressing::NODE_ASN, addressing::ROUTER_ASN, addressing::ROUTER_V4.into(), &[]),
        yaml::bgp_advertisement("public", &["ipAddressPools: [public]"]),
        service("web-l2", "lan"),
        service("web-bgp", "public"),
    ])
}

/// ferrolb from `manifests/` on the kubelets, its configuration, the Services; returns
/// the example Service's ingress and the addresses of web-l2 and web-bgp.
pub(super) fn install(
    t: &Timeline,
    lab: &Lab,
    bird: &Bird,
    cluster: &Cluster,
) -> Result<(String, IpAddr, IpAddr), Error> {
    let installed = Instant::now();
    // The speaker as shipped: no argument added (its heartbeat defaults included).
    let (repository, tag) = IMAGE.rsplit_once(':').unwrap_or((IMAGE, "latest"));
    let (repository, tag) = (format!("image.repository={repository}"), format!("image.tag={tag}"));
    // The bootstrap static pods' role came first, from `ferrolb-bootstrap checkpoint
    // rbac` (the VIP must exist before the cluster): Helm would refuse to adopt it.
    helm::install(cluster, &[&repository, &tag, "bootstrap.rbac=false"])?;
    t.say(format!(
        "helm install ferrolb manifests/helm/ferrolb --set {repository} --set {tag} --set bootstrap.rbac=false \
         (its role came with the static pods; every other value default)"
    ));
    let ns = ferrolb::NAMESPACE;
    ferrolb::wait_jsonpath(
        cluster,
        &["daemonset", "-n", ns, "ferrolb-speaker"],
        "{.status.numberReady}",
        T,
        |n| n == NODES.to_string(),
    )?;
    t.say(format!(
        "speaker DaemonSet Ready on {NODES} nodes {:.1} s after helm install",
        installed.elapsed().as_secs_f64()
    ));
    ferrolb::wait_jsonpath(
        cluster,
        &["deployment", "-n", ns, "ferrolb-controller"],
        "{.status.readyReplicas}",
        T,
        |n| n == "2",
    )?;
    t.say(format!(
        "controller Deployment 2/2 Ready {:.1} s after helm install",
        installed.elapsed().as_secs_f64()
    ));
    let pods = kubectl_json(cluster, &["get", "pods", "-n", ns])?;
    let mut speaker_nodes = Vec::new();
    for pod in pods["items"].as_array().into_iter().flatten() {
        let spec = &pod["spec"];
        let name = &pod["metadata"]["name"];
        check(spec["containers"][0]["image"] == IMAGE, || {
            format!("{name} runs {}", spec["containers"][0]["image"])
        })?;
        match spec["serviceAccountName"].as_str().unwrap_or_default() {
            "ferrolb-speaker" => {
                let args = &spec["containers"][0]["args"];
                let tuned = args
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|x| x.as_str().is_some_and(|a| a.starts_with("--l2-heartbeat")));
                check(!tuned, || {
                    format!("{name} runs with heartbeat flags the manifests do not set: {args}")
                })?;
                speaker_nodes.push(spec["nodeName"].as_str().unwrap_or_default().to_owned());
            }
            "ferrolb-controller" => {
                // On the pod network, not the node's.
                let ip = pod["status"]["podIP"].as_str().unwrap_or_default();
                check(ip.starts_with("198.19.2"), || format!("controller pod IP {ip}"))?;
            }
            other => return Err(Error::Check(format!("a pod of ServiceAccount {other} in {ns}"))),
        }
    }
    speaker_nodes.sort();
    check(speaker_nodes == (1..=NODES).map(addressing::node_name).collect::<Vec<_>>(), || {
        format!("speakers on {speaker_nodes:?}")
    })?;
    println!(
        "\n--- kubectl get pods -A -o wide ---\n{}",
        cluster.kubectl(&["get", "pods", "-A", "-o", "wide"])?
    );

    // LoadBalancer Services get addresses and the client reaches their pod.
    let examples = ferrolb::manifests_dir().join("examples");
    cluster.kubectl(&["apply", "-f", &examples.join("l2.yaml").display().to_string()])?;
    cluster.kubectl_stdin(&["apply", "-f", "-"], &backend())?;
    let service_at = Instant::now();
    cluster.kubectl(&["apply", "-f", &examples.join("service.yaml").display().to_string()])?;
    cluster.kubectl_stdin(&["apply", "-f", "-"], &bgp_and_services())?;
    t.say(
        "kubectl apply: manifests/examples/l2.yaml and service.yaml (web, Local), a BGPPeer to the router, \
         Services web-l2 (pool lan) and web-bgp (pool public), a Deployment of app=web",
    );
    let ingress = wait_ingress(cluster, "web")?;
    t.say(format!(
        "Service web got {ingress} {:.1} s after it was created",
        service_at.elapsed().as_secs_f64()
    ));
    let l2 = first_v4(&wait_ingress(cluster, "web-l2")?)?;
    let bgp = first_v4(&wait_ingress(cluster, "web-bgp")?)?;
    t.say(format!("Service web-l2 got {l2}, web-bgp got {bgp}"));
    reach(lab, cluster, first_v4(&ingress)?, "")?;
    t.say(format!("client → http://{}/metrics on the LAN: the web pod answers", first_v4(&ingress)?));
    let hops: Vec<IpAddr> = (1..=NODES).map(addressing::node_ip).collect();
    routers::wait_established(bird, &hops, T)?;
    routers::wait_kernel_route(lab.router(), &format!("{bgp}/32"), &hops, T)?;
    t.say(format!("router: {NODES} BGP sessions Established, {bgp}/32 ECMP over every node"));
    for a in [l2, bgp] {
        reach(lab, cluster, a, "")?;
    }
    t.say(format!(
        "client → http://{l2}/metrics (ARP) and http://{bgp}/metrics (through the router): answered"
    ));

    // ferrolb's components authenticated with their ServiceAccounts' tokens (the pods
    // hold no other credential: in-cluster config, no kubeconfig mounted).
    let audit = cluster.audit();
    for sa in [ferrolb::SPEAKER_SA, ferrolb::CONTROLLER_SA] {
        let user = format!("system:serviceaccount:{ns}:{sa}");
        check(audit.iter().any(|r| r.user == user), || format!("no request by {user}"))?;
    }
    Ok((ingress, l2, bgp))
}
