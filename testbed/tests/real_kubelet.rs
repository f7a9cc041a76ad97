//! Real nodes (issue #17 point 2): `Cluster::start` with `kubelets` runs a real kubelet
//! (`ferrolb-kube kubelet`, v1.37) and its own containerd + runc in each of three lab
//! node namespaces. Every Node registers itself Ready and loses the not-ready taint (the
//! node lifecycle controller runs); ferrolb's image archive, imported into each node's
//! containerd, runs as a hostNetwork static pod whose speaker really serves its metrics
//! in the node's namespace, from the kubelet's cgroup; and dropping the cluster leaves no
//! process, mount, cgroup, host directory or changed sysctl behind.
//!
//! Needs `target/kube/current/ferrolb-kube` (testbed/test.sh builds it), the debug
//! binaries the image holds, containerd, runc and a C compiler (testbed/prereqs.sh).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ferrolb_cluster::containerd;
use ferrolb_cluster::node::host;
use ferrolb_cluster::{Cluster, ClusterConfig};
use ferrolb_lab::speaker::yaml;
use ferrolb_lab::{Lab, LabConfig, addressing, client, netns, wait};
use ferrolb_release::image::{self, Dockerfile};
use serde_json::Value;

const NODES: usize = 3;
/// The speaker's metrics port on each node (hostNetwork).
const METRICS_PORT: u16 = 7472;
/// Pod start, probe, mirror pod: generous for three nodes on a loaded 2-core machine.
const T: Duration = Duration::from_secs(180);

/// A hostNetwork static pod running ferrolb's image: an init container printing the
/// speaker's version, then the speaker in static mode with its metrics on the node's address.
fn static_pod(node: usize, image: &str, static_file: &Path) -> String {
    let ip = addressing::node_v4(node);
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: ferrolb-speaker, namespace: kube-system}}
spec:
  hostNetwork: true
  initContainers:
  - name: version
    image: {image}
    imagePullPolicy: Never
    command: [/usr/local/bin/ferrolb-speaker, --version]
  containers:
  - name: speaker
    image: {image}
    imagePullPolicy: Never
    command: [/usr/local/bin/ferrolb-speaker]
    args: [--node-name, {name}, --static, /etc/ferrolb/static.yaml, --metrics-addr, "{ip}:{METRICS_PORT}"]
    readinessProbe:
      httpGet: {{path: /readyz, port: {METRICS_PORT}}}
      periodSeconds: 1
    volumeMounts: [{{name: static, mountPath: /etc/ferrolb/static.yaml, readOnly: true}}]
  volumes: [{{name: static, hostPath: {{path: {file}, type: File}}}}]
"#,
        name = addressing::node_name(node),
        file = static_file.display(),
    )
}

fn kubectl_json(cluster: &Cluster, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&cluster.kubectl(&all).unwrap()).unwrap()
}

/// Processes whose command line has `word` as one of its arguments or in its program path.
fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .unwrap_or_default()
}

fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Every cgroup directory named `name` directly below a hierarchy's root.
fn cgroups_named(name: &str) -> BTreeSet<PathBuf> {
    std::fs::read_dir("/sys/fs/cgroup")
        .unwrap()
        .map(|h| h.unwrap().path().join(name))
        .filter(|p| p.exists())
        .collect()
}

fn shim_sockets() -> BTreeSet<String> {
    std::fs::read_dir("/run/containerd/s")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn three_real_kubelets_register_ready_run_the_ferrolb_image_and_leave_nothing() {
    let sysctls_before: Vec<(&str, String)> =
        host::SYSCTLS.iter().map(|k| (*k, host::read_sysctl(k).unwrap())).collect();
    let host_dirs_before: Vec<bool> = host::HOST_DIRS.iter().map(|d| Path::new(d).exists()).collect();
    let shims_before = shim_sockets();

    let lab = Lab::up(LabConfig::nodes(NODES)).unwrap();
    let started = Instant::now();
    let cluster = Cluster::start(&lab, &ClusterConfig { kubelets: true, ..Default::default() }).unwrap();
    println!("cluster with {NODES} real kubelets up in {:.1} s", started.elapsed().as_secs_f64());
    for (node, after) in cluster.ready_after() {
        println!("{node}: Ready {:.1} s after its kubelet started", after.as_secs_f64());
    }
    assert_eq!(cluster.real_nodes().len(), NODES);

    // Every Node registered by its own kubelet: versions from the kubelet and containerd,
    // the lab addresses as InternalIPs, a Lease the kubelet renews, and no not-ready taint
    // once the node lifecycle controller has seen it Ready.
    for i in 1..=NODES {
        let name = addressing::node_name(i);
        let node = wait::until_value(
            &format!("Node {name} without the not-ready taint"),
            T,
            || Ok(kubectl_json(&cluster, &["get", "node", &name])),
            |n| {
                n["spec"]["taints"]
                    .as_array()
                    .is_none_or(|t| !t.iter().any(|t| t["key"] == "node.kubernetes.io/not-ready"))
            },
        )
        .unwrap();
        let info = &node["status"]["nodeInfo"];
        assert_eq!(info["kubeletVersion"], "v1.37.2", "{name}: {info}");
        assert!(info["containerRuntimeVersion"].as_str().unwrap().starts_with("containerd://"), "{info}");
        let ready =
            node["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!(ready["status"], "True", "{name}: {ready}");
        assert_eq!(ready["reason"], "KubeletReady", "{name}: {ready}");
        let internal: Vec<&str> = node["status"]["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["type"] == "InternalIP")
            .map(|a| a["address"].as_str().unwrap())
            .collect();
        assert_eq!(
            internal,
            [addressing::node_v4(i).to_string(), addressing::node_v6(i).to_string()],
            "{name}"
        );
        let lease = wait::until(&format!("the kubelet's Lease {name}"), T, || {
            Ok(cluster.kubectl(&["get", "lease", "-n", "kube-node-lease", &name, "-o", "json"]).ok())
        })
        .unwrap();
        let lease: Value = serde_json::from_str(&lease).unwrap();
        assert_eq!(lease["spec"]["holderIdentity"], name.as_str());
        // The kubelet and its containerd run in the node's namespace.
        let in_ns = lab.node(i).pids();
        for pid in cluster.real_nodes()[i - 1].pids() {
            assert!(
                in_ns.contains(&pid),
                "{name}: {pid} ({}) is not in {}",
                cmdline(pid),
                lab.node(i).name()
            );
        }
    }
    let labelled =
        cluster.kubectl(&["get", "nodes", "-l", "node-role.kubernetes.io/control-plane", "-o", "name"]);
    assert_eq!(labelled.unwrap().trim(), "node/node1");

    // ferrolb's image, imported into each node's containerd: no registry anywhere.
    let dockerfile = Dockerfile::workspace().unwrap();
    let binaries = image::workspace_binaries(&dockerfile, "debug").unwrap();
    let archive = lab.dir().join("ferrolb-image.tar");
    let built = image::build(&dockerfile, &binaries, "localhost/ferrolb:kubelet-test", &archive).unwrap();
    for (i, node) in cluster.real_nodes().iter().enumerate() {
        let t = Instant::now();
        node.import(&archive).unwrap();
        println!(
            "{}: imported {} MB in {:.1} s",
            node.name(),
            built.archive_bytes >> 20,
            t.elapsed().as_secs_f64()
        );
        let file = node.paths().dir.join("static.yaml");
        std::fs::write(&file, yaml::stream(&[yaml::node(i + 1)])).unwrap();
        // Written aside and renamed: the kubelet must never read half a manifest.
        let tmp = node.paths().dir.join("speaker.yaml");
        std::fs::write(&tmp, static_pod(i + 1, &built.name, &file)).unwrap();
        std::fs::rename(&tmp, node.static_pod_path().join("speaker.yaml")).unwrap();
    }

    let mut leftovers = Vec::new();
    for (i, node) in cluster.real_nodes().iter().enumerate().map(|(i, n)| (i + 1, n)) {
        let name = addressing::node_name(i);
        let mirror = format!("ferrolb-speaker-{name}");
        // The mirror pod the kubelet creates: Running, Ready through its readiness probe.
        let pod = wait::until_value(
            &format!("{mirror} Running and Ready"),
            T,
            || Ok(cluster.kubectl(&["get", "pod", "-n", "kube-system", &mirror, "-o", "json"]).ok()),
            |p| {
                p.as_deref().and_then(|p| serde_json::from_str::<Value>(p).ok()).is_some_and(|p| {
                    p["status"]["phase"] == "Running"
                        && p["status"]["conditions"]
                            .as_array()
                            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
                })
            },
        )
        .unwrap();
        let pod: Value = serde_json::from_str(&pod.unwrap()).unwrap();
        assert_eq!(pod["spec"]["nodeName"], name.as_str());
        assert_eq!(
            pod["status"]["podIP"],
            addressing::node_v4(i).to_string(),
            "hostNetwork: the node's address"
        );
        // The init container ran the image's binary (its log, read through the kubelet).
        let version = cluster.kubectl(&["logs", "-n", "kube-system", &mirror, "-c", "version"]).unwrap();
        assert!(
            version.starts_with(&format!("ferrolb-speaker {} (", env!("CARGO_PKG_VERSION"))),
            "{mirror} --version: {version:?}"
        );
        // The speaker serves its metrics on the node's address, inside the node's namespace.
        let metrics = client::http_get(
            lab.node(i),
            SocketAddr::new(addressing::node_v4(i).into(), METRICS_PORT),
            "/metrics",
            Duration::from_secs(5),
        )
        .unwrap();
        assert!(metrics.contains("ferrolb_build_info"), "{name} /metrics: {metrics}");
        // And it is a process of that namespace, as the image's user, in the kubelet's cgroup.
        let speaker = lab
            .node(i)
            .pids()
            .into_iter()
            .find(|p| cmdline(*p).starts_with("/usr/local/bin/ferrolb-speaker --node-name"))
            .unwrap_or_else(|| panic!("no speaker process in {}", lab.node(i).name()));
        let status = std::fs::read_to_string(format!("/proc/{speaker}/status")).unwrap();
        let uid =
            status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap().split_whitespace().next().unwrap();
        assert_eq!(uid, "65532", "the image's USER");
        let cgroup = std::fs::read_to_string(format!("/proc/{speaker}/cgroup")).unwrap();
        assert!(
            cgroup.lines().any(|l| l.contains(&format!(":/{}/kubepods", node.cgroup_root()))),
            "{name}: the speaker is not under the kubelet's cgroupRoot: {cgroup}"
        );
        // What one node costs: kubelet, containerd and the shims (not the pods).
        let socket = node.containerd().unwrap().socket().to_string_lossy().into_owned();
        let shims = containerd::processes_naming(&socket);
        let [kubelet, ctrd] = node.pids()[..] else { panic!("{name}: pids {:?}", node.pids()) };
        println!(
            "{name}: RSS kubelet {} MiB, containerd {} MiB, {} shims {} MiB, speaker {} MiB",
            rss_kib(kubelet) >> 10,
            rss_kib(ctrd) >> 10,
            shims.len(),
            shims.iter().map(|p| rss_kib(*p)).sum::<u64>() >> 10,
            rss_kib(speaker) >> 10,
        );
        leftovers.extend(node.pids());
        leftovers.extend(shims);
        leftovers.extend(lab.node(i).pids());
    }
    // While the kubelets hold the host, their sysctls are saved for the last one to restore.
    assert_eq!(host::saved_sysctls().len(), host::SYSCTLS.len());

    let lab_dir = lab.dir().to_owned();
    let cgroup_roots: Vec<String> = cluster.real_nodes().iter().map(|n| n.cgroup_root().to_owned()).collect();
    let t = Instant::now();
    drop(cluster);
    println!("{NODES} real nodes and the control plane stopped in {:.1} s", t.elapsed().as_secs_f64());

    // Nothing of the nodes is left, even before the lab's namespaces go.
    let alive: Vec<String> =
        leftovers.iter().filter(|p| netns::pid_alive(**p)).map(|p| format!("{p}: {}", cmdline(*p))).collect();
    assert!(alive.is_empty(), "processes left: {alive:?}");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mounts: Vec<&str> = mountinfo.lines().filter(|l| l.contains(lab_dir.to_str().unwrap())).collect();
    assert!(mounts.is_empty(), "mounts left: {mounts:?}");
    for root in &cgroup_roots {
        assert!(cgroups_named(root).is_empty(), "cgroups left: {:?}", cgroups_named(root));
    }
    let new_shims: Vec<String> = shim_sockets().difference(&shims_before).cloned().collect();
    assert!(new_shims.is_empty(), "shim sockets left in /run/containerd/s: {new_shims:?}");
    for (key, before) in &sysctls_before {
        assert_eq!(&host::read_sysctl(key).unwrap(), before, "{key} not restored");
    }
    for (d, existed) in host::HOST_DIRS.iter().zip(host_dirs_before) {
        assert_eq!(Path::new(d).exists(), existed, "{d}: the kubelets' host directory");
    }
    let kubelet_dirs: Vec<PathBuf> = std::fs::read_dir(lab_dir.join("cluster"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("kubelet-")) && p.is_dir())
        .collect();
    assert!(kubelet_dirs.is_empty(), "node directories left: {kubelet_dirs:?}");
    drop(lab);
}
