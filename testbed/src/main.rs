//! `ferrolb-testbed`: bring labs up and down, look at them, run the demo.

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use ferrolb_lab::lab::{self, Lab, LabConfig};
use ferrolb_lab::netns;
use ferrolb_lab::routers::{Bird, Frr, GoBgp, RouterSpec};

#[derive(Parser, Debug)]
#[command(version = env!("FERROLB_VERSION"), about = "Network-namespace labs with real routers for ferrolb")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Build a lab that stays up after this command exits; prints how to enter it.
    Up {
        /// Number of nodes on the segment.
        #[arg(long, default_value_t = 2)]
        nodes: usize,
        /// Router to start in r1.
        #[arg(long, value_enum, default_value_t = RouterKind::Bird)]
        router: RouterKind,
    },
    /// Remove labs: the given ids, or --stale (owner process gone), or --all.
    Down {
        /// Lab ids (the namespace prefix printed by `up`).
        ids: Vec<String>,
        /// Every ferrolb-testbed namespace on the machine, whoever made it.
        #[arg(long)]
        all: bool,
        /// Namespaces whose creating process no longer runs.
        #[arg(long)]
        stale: bool,
    },
    /// List labs, their namespaces and the processes inside.
    Status,
    /// The demo: real router, announced service addresses, a client reaching them.
    Demo {
        /// On real kubelets: the bootstrap static pods' VIP, ferrolb's image, the speaker
        /// DaemonSet upgraded under the client's probes, a cold start (testbed/kube/KUBELET.md).
        #[arg(long)]
        kubelets: bool,
    },
    /// A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) in a lab.
    Cluster {
        #[command(subcommand)]
        cmd: ClusterCmd,
    },
    /// Benchmarks: figures printed beside the systems ferrolb is measured against.
    Bench {
        #[command(subcommand)]
        bench: Bench,
    },
    /// The ferrolb image without a registry: an OCI archive for `ctr images import`.
    Image {
        #[command(subcommand)]
        cmd: ImageCmd,
    },
    /// The Helm chart (manifests/helm/ferrolb) from the kustomize sources: lists its stale
    /// files (exit 1 when there are), or writes it with --write.
    Chart {
        /// Write the chart instead of checking it.
        #[arg(long)]
        write: bool,
    },
    /// The speaker's hot-text linker script from callgrind profiles (testbed/hot-text.sh).
    HotText {
        /// callgrind output files of ferrolb-speaker runs, in the order they were written.
        #[arg(required = true)]
        profiles: Vec<std::path::PathBuf>,
        /// Where to write the linker script.
        #[arg(long, default_value = "speaker/hot-text.ld")]
        out: std::path::PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum ImageCmd {
    /// Assemble the Dockerfile's image (its BINARIES, USER, ENTRYPOINT on a locally
    /// assembled base) from this workspace's built binaries, and check it against the Dockerfile.
    Build {
        /// Image name containerd gives it on import.
        #[arg(long, default_value = ferrolb_release::image::DEFAULT_NAME)]
        tag: String,
        /// The archive to write.
        #[arg(long, default_value = "ferrolb-image.tar")]
        out: std::path::PathBuf,
        /// Cargo profile of the binaries (target/<profile>/; `$FERROLB_<NAME>_BIN` wins).
        #[arg(long, default_value = "release")]
        profile: String,
    },
}

#[derive(Subcommand, Debug)]
enum ClusterCmd {
    /// Start a lab with a real control plane that stays up after this command exits;
    /// the last line printed is `export KUBECONFIG=<admin kubeconfig>`.
    Up {
        /// Cluster name (several can run side by side).
        #[arg(long, default_value = "ferrolb")]
        name: String,
        /// kube-apiservers, one per control-plane node (nodes 1..=K).
        #[arg(long, default_value_t = 1)]
        control_planes: usize,
        /// Lab nodes in all (at least the control planes).
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        /// A real kubelet and containerd on every node (hostNetwork pods, static pods,
        /// images imported locally) instead of the testbed acting as the kubelet.
        #[arg(long)]
        kubelets: bool,
        /// Fake Nodes (kwok-node-00001, …) that kwok keeps Ready beside the lab's nodes;
        /// pods bound to them by nodeName become Running and Ready (testbed/kube/KWOK.md).
        #[arg(long, default_value_t = 0)]
        kwok_nodes: usize,
    },
    /// Stop a cluster started by `cluster up` and remove its lab and state.
    Down {
        /// Cluster name.
        #[arg(long, default_value = "ferrolb")]
        name: String,
    },
    /// Run a cluster in the foreground until SIGTERM (what `cluster up` starts).
    #[command(hide = true)]
    Serve {
        #[arg(long)]
        name: String,
        #[arg(long)]
        control_planes: usize,
        #[arg(long)]
        nodes: usize,
        #[arg(long)]
        kubelets: bool,
        #[arg(long)]
        kwok_nodes: usize,
    },
}

#[derive(Subcommand, Debug)]
enum Bench {
    /// L2 failover: client-visible outage and takeover time when the VIP owner fails,
    /// ferrolb vs keepalived (defaults, VRRPv3 100 ms and 10 ms adverts), IPv4 and IPv6.
    Failover {
        /// Number of trials per system, failure and family.
        #[arg(long, default_value_t = 10)]
        trials: usize,
        /// Only this address family: v4 or v6 (both when absent).
        #[arg(long)]
        family: Option<ferrolb_bench::failover::Family>,
        /// Only this failure: kill (the owner's daemon SIGKILLed, link up) or link (the
        /// owner's link down); both, plus ferrolb's SIGTERM handover, when absent.
        #[arg(long)]
        failure: Option<ferrolb_bench::failover::Failure>,
    },
    /// L2 active-active: connection rate and throughput through one address as the nodes
    /// serving it grow, one elected node against every node, and the frames flooding costs.
    ActiveActive {
        /// Node counts to measure (a lab each).
        #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 3])]
        nodes: Vec<usize>,
        /// Length of each measurement, seconds.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Client threads opening connections, and parallel streams.
        #[arg(long, default_value_t = 8)]
        streams: usize,
        /// Keep the run in benchmarks/active-active.json and write it as BENCHMARKS.md's
        /// "Active-active L2" section with its plots.
        #[arg(long)]
        write: bool,
        /// Write the section and plots again from benchmarks/active-active.json, measuring nothing.
        #[arg(long, conflicts_with = "write")]
        rewrite: bool,
    },
    /// L2 soak: false failovers of ferrolb (3 nodes) and keepalived (VRRPv3, 10 ms adverts)
    /// while stress-ng saturates every core and nothing fails.
    L2Soak {
        /// Length of each system's soak, seconds.
        #[arg(long, default_value_t = 300)]
        seconds: u64,
    },
    /// Apiserver VIP: client-visible outage when the owner's apiserver dies, ferrolb-bootstrap vs keepalived.
    ApiserverFailover {
        /// Number of trials per system.
        #[arg(long, default_value_t = 5)]
        trials: usize,
        /// Health check interval, milliseconds (keepalived: whole seconds, at least 1).
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// Consecutive failed checks before a member is unhealthy.
        #[arg(long, default_value_t = 3)]
        failure_threshold: u32,
    },
    /// BFD: time for ferrolb and for BIRD / FRR to declare a session down after a link cut.
    Bfd {
        /// Number of trials per router.
        #[arg(long, default_value_t = 10)]
        trials: usize,
        /// Desired Min TX / Required Min RX interval, milliseconds.
        #[arg(long, default_value_t = 100)]
        interval_ms: u64,
        /// Detect Mult.
        #[arg(long, default_value_t = 3)]
        multiplier: u8,
    },
    /// BGP scale: time from the input change to N /32s in the router's RIB and kernel,
    /// withdraw time, bytes per prefix, peak RSS; BIRD as the speaker is the reference.
    BgpScale {
        /// Table sizes to measure.
        #[arg(long, value_delimiter = ',', default_values_t = [10_000u32, 50_000, 100_000])]
        sizes: Vec<u32>,
        /// Speakers to measure (bird, ferrolb, gobgp, exabgp); BIRD runs first, the reference.
        #[arg(long, value_delimiter = ',', default_value = "bird,ferrolb,gobgp,exabgp")]
        systems: Vec<ferrolb_bench::bgp_scale::System>,
        /// ferrolb only (same as --systems ferrolb).
        #[arg(long)]
        ferrolb_only: bool,
        /// Runs of every system at every size; with more than one, each ratio is to BIRD
        /// in the same run and a min / median / max summary follows.
        #[arg(long, default_value_t = 1)]
        runs: usize,
    },
    /// Planner: full and incremental plan times and peak RSS with N Services, in process
    /// (no lab) and as a real `ferrolb-speaker --static` process (one-node lab, root).
    Plan {
        /// Services in the model.
        #[arg(long, default_value_t = 10_000)]
        services: usize,
        /// Cluster sizes to measure.
        #[arg(long, value_delimiter = ',', default_values_t = [3usize, 50])]
        nodes: Vec<usize>,
        /// Single changes measured per kind.
        #[arg(long, default_value_t = 200)]
        changes: usize,
        /// Skip the speaker process (which needs root and a built ferrolb-speaker).
        #[arg(long)]
        no_speaker: bool,
    },
    /// One new Service's plan in Kubernetes mode at N Services: the speaker in process on
    /// the in-process fake apiserver (`ferrolb_speaker_replan_seconds`, root).
    KubeReplan {
        /// Services at rest before the timed ones.
        #[arg(long, value_delimiter = ',', default_values_t = [1_000usize, 10_000, 50_000])]
        services: Vec<usize>,
    },
    /// One speaker's RSS and heap at rest with N fake Nodes and S Services, served by the
    /// fake apiserver (issue #39's memory goal, in minutes; root).
    SpeakerMemory {
        #[arg(long, value_delimiter = ',', default_values_t = [5_000usize])]
        nodes: Vec<usize>,
        #[arg(long, value_delimiter = ',', default_values_t = [1_000usize, 10_000])]
        services: Vec<usize>,
        /// Seconds at rest before reading (the speaker trims its heap every 10 s).
        #[arg(long, default_value_t = 30)]
        rest_seconds: u64,
    },
    /// The report: failover, L2 soak and BGP scale with their peers in one run, written as
    /// BENCHMARKS.md and SVG figures under benchmarks/, with the machine and versions.
    Report {
        /// Failover trials per system, failure and family.
        #[arg(long, default_value_t = 5)]
        trials: usize,
        /// Length of each system's soak, seconds.
        #[arg(long, default_value_t = 300)]
        soak_seconds: u64,
        /// BGP table sizes to measure.
        #[arg(long, value_delimiter = ',', default_values_t = [10_000u32, 50_000, 100_000])]
        sizes: Vec<u32>,
        /// BGP scale runs of every speaker at every size (rows show the median run; goals
        /// judge the median of the per-run ratios).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Directory receiving BENCHMARKS.md and benchmarks/ (default: the workspace root).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
    /// SWIM membership of many members in one process, simulated time, delay and loss:
    /// traffic per member, false suspicions, time for every member to learn a death;
    /// the L2 heartbeats of an owner of 1 000 addresses (issue #39 point 3).
    MembershipScale {
        /// Cluster sizes.
        #[arg(long, value_delimiter = ',', default_value = "100,1000,5000")]
        sizes: Vec<usize>,
        /// Shares of datagrams lost, in percent.
        #[arg(long, value_delimiter = ',', default_value = "0,1,5")]
        loss: Vec<f64>,
        /// Simulated seconds measured at rest per size and loss.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
    /// Static-file edit → UPDATE at an ExaBGP recorder (receive timestamp).
    FileLatency {
        /// Number of edits.
        #[arg(long, default_value_t = 20)]
        trials: usize,
    },
    /// The real control plane: Service created → address → route in BIRD's RIB; controller
    /// cold start and speaker restart with many Services (issue #15 point 4).
    WholePath {
        /// Services created one after another for the latency figures.
        #[arg(long, default_value_t = 200)]
        services: usize,
        /// Services holding addresses during the controller and speaker restarts.
        #[arg(long, default_value_t = 10_000)]
        existing: usize,
    },
    /// The controller's peak RSS on a cold start with N Services holding addresses, served
    /// by the fake apiserver (issue #15 point 3).
    ControllerMemory {
        /// Numbers of Services, one cold start each (the fake takes ~10 minutes to list 100k).
        #[arg(long, value_delimiter = ',', default_values_t = [10_000usize, 50_000])]
        services: Vec<usize>,
        /// On the real control plane (etcd, kube-apiserver) instead of the fake apiserver.
        #[arg(long)]
        real: bool,
    },
    /// At cluster scale on the real control plane (issue #39): kwok's fake Nodes, two real
    /// speakers and the controller; ferrolb's apiserver requests and what each component
    /// receives at rest, per Service change and on a rolling restart of the speakers, their
    /// RSS and CPU, Service created → route.
    Scale {
        /// Fake Nodes; one lab per value and per value of --services.
        #[arg(long, value_delimiter = ',', default_values_t = [100usize, 1_000])]
        nodes: Vec<usize>,
        /// LoadBalancer Services made before measuring.
        #[arg(long, value_delimiter = ',', default_values_t = [100usize, 1_000])]
        services: Vec<usize>,
        /// How long ferrolb is watched at rest, seconds.
        #[arg(long, default_value_t = 20)]
        rest_seconds: u64,
        /// Services created one after another at rest, each timed to its route (100: p99 is
        /// not just the maximum).
        #[arg(long, default_value_t = 100)]
        late: usize,
        /// With an L2Advertisement (of a pool no Service uses), so every speaker watches every
        /// Node as in a cluster that announces on L2: what the Nodes cost each speaker.
        #[arg(long)]
        l2: bool,
        /// Write the figures as BENCHMARKS.md's cluster-scale section, with log-log plots
        /// under benchmarks/ (the rest of the file stays as `bench report` wrote it).
        #[arg(long)]
        write: bool,
        /// Measure nothing: write the cluster-scale section and its plots again from
        /// benchmarks/scale.json, where --write keeps every size measured so far.
        #[arg(long, conflicts_with = "write")]
        rewrite: bool,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum RouterKind {
    Bird,
    Frr,
    Gobgp,
    None,
}

fn chart(write: bool) -> anyhow::Result<()> {
    use ferrolb_release::chart;
    let repo = ferrolb_lab::binary::workspace_root();
    if write {
        let written = chart::write(&repo)?;
        println!("wrote {} files into {}", written.len(), chart::CHART_DIR);
        return Ok(());
    }
    let stale = chart::stale(&repo)?;
    if stale.is_empty() {
        println!("{} is up to date with manifests/", chart::CHART_DIR);
        Ok(())
    } else {
        bail!("{} is stale ({}): run `{}`", chart::CHART_DIR, stale.join(", "), chart::REGENERATE)
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line, the whole cause chain, no backtrace.
            eprintln!("ferrolb-testbed: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::Up { nodes, router } => up(nodes, router),
        Cmd::Down { ids, all, stale } => down(&ids, all, stale),
        Cmd::Status => status(),
        Cmd::Demo { kubelets: false } => ferrolb_testbed::demo::run().context("demo failed"),
        Cmd::Demo { kubelets: true } => demo_kubelets(),
        Cmd::Cluster { cmd: ClusterCmd::Up { name, control_planes, nodes, kubelets, kwok_nodes } } => {
            ferrolb_cluster::cli::up(&name, control_planes, nodes, kubelets, kwok_nodes)
        }
        Cmd::Cluster { cmd: ClusterCmd::Down { name } } => ferrolb_cluster::cli::down(&name),
        Cmd::Cluster { cmd: ClusterCmd::Serve { name, control_planes, nodes, kubelets, kwok_nodes } } => {
            ferrolb_cluster::cli::serve(&name, control_planes, nodes, kubelets, kwok_nodes)
        }
        Cmd::Bench { bench: Bench::Failover { trials, family, failure } } => {
            Ok(ferrolb_bench::failover::run(&ferrolb_bench::failover::Params { trials, family, failure })?)
        }
        Cmd::Bench { bench: Bench::L2Soak { seconds } } => Ok(ferrolb_bench::l2_soak::run(seconds)?),
        Cmd::Bench { bench: Bench::ActiveActive { nodes, seconds, streams, write, rewrite } } => {
            use ferrolb_bench::active_active;
            let root = ferrolb_lab::binary::workspace_root();
            if rewrite {
                return Ok(active_active::rewrite(&root)?);
            }
            let settings = active_active::Settings { nodes, seconds, streams };
            let rows = active_active::run(&settings)?;
            if write {
                active_active::write(&rows, &settings, &root)?;
            }
            Ok(())
        }
        Cmd::Bench { bench: Bench::ApiserverFailover { trials, interval_ms, failure_threshold } } => {
            let interval = std::time::Duration::from_millis(interval_ms);
            Ok(ferrolb_bench::apiserver_failover::run(&ferrolb_bench::apiserver_failover::Params {
                trials,
                interval,
                failure_threshold,
            })?)
        }
        Cmd::Bench { bench: Bench::Bfd { trials, interval_ms, multiplier } } => {
            Ok(ferrolb_bench::bfd::run(trials, std::time::Duration::from_millis(interval_ms), multiplier)?)
        }
        Cmd::Bench { bench: Bench::BgpScale { sizes, systems, ferrolb_only, runs } } => {
            let systems =
                if ferrolb_only { vec![ferrolb_bench::bgp_scale::System::Ferrolb] } else { systems };
            Ok(ferrolb_bench::bgp_scale::run(&sizes, &systems, runs)?)
        }
        Cmd::Bench { bench: Bench::Report { trials, soak_seconds, sizes, runs, out } } => {
            let out = out.unwrap_or_else(ferrolb_lab::binary::workspace_root);
            Ok(ferrolb_bench::report::run(&ferrolb_bench::report::Params {
                trials,
                soak_seconds,
                sizes,
                runs,
                out,
            })?)
        }
        Cmd::Bench { bench: Bench::MembershipScale { sizes, loss, seconds } } => {
            let losses = loss.iter().map(|l| l / 100.0).collect();
            Ok(ferrolb_bench::membership_scale::run(&ferrolb_bench::membership_scale::Params {
                sizes,
                losses,
                seconds,
            })?)
        }
        Cmd::Bench { bench: Bench::FileLatency { trials } } => Ok(ferrolb_bench::file_latency::run(trials)?),
        Cmd::Bench { bench: Bench::WholePath { services, existing } } => {
            Ok(ferrolb_bench::whole_path::run(&ferrolb_bench::whole_path::Params { services, existing })?)
        }
        Cmd::Bench { bench: Bench::ControllerMemory { services, real } } => {
            Ok(ferrolb_bench::controller_memory::run(&services, real)?)
        }
        Cmd::Bench { bench: Bench::Scale { nodes, services, rest_seconds, late, l2, write, rewrite } } => {
            use ferrolb_bench::scale;
            if rewrite {
                return Ok(scale::write::rewrite(&ferrolb_lab::binary::workspace_root())?);
            }
            let rest = std::time::Duration::from_secs(rest_seconds);
            Ok(scale::run(&scale::Params {
                nodes,
                services,
                l2,
                settings: scale::Settings { rest, late },
                write,
            })?)
        }
        Cmd::Image { cmd: ImageCmd::Build { tag, out, profile } } => image_build(&tag, &out, &profile),
        Cmd::HotText { profiles, out } => hot_text(&profiles, &out),
        Cmd::Chart { write } => chart(write),
        Cmd::Bench { bench: Bench::SpeakerMemory { nodes, services, rest_seconds } } => {
            Ok(ferrolb_bench::speaker_memory::run(
                &nodes,
                &services,
                std::time::Duration::from_secs(rest_seconds),
            )?)
        }
        Cmd::Bench { bench: Bench::KubeReplan { services } } => {
            Ok(ferrolb_bench::kube_replan::run(&services)?)
        }
        Cmd::Bench { bench: Bench::Plan { services, nodes, changes, no_speaker } } => {
            Ok(ferrolb_bench::plan::run(services, &nodes, changes, !no_speaker)?)
        }
    }
}

fn demo_kubelets() -> anyhow::Result<()> {
    use ferrolb_testbed::demo::kubelets;
    let report = kubelets::run().context("demo --kubelets failed")?;
    let up = &report.upgrade;
    let lost: u64 = [&up.l2.1, &up.bgp.1].iter().map(|r| r.lost()).sum();
    anyhow::ensure!(lost == 0, "the speaker upgrade cost the client {lost} connections");
    Ok(())
}

fn image_build(tag: &str, out: &std::path::Path, profile: &str) -> anyhow::Result<()> {
    use ferrolb_release::image;
    let dockerfile = image::Dockerfile::workspace()?;
    let binaries = image::workspace_binaries(&dockerfile, profile)?;
    let built = image::build(&dockerfile, &binaries, tag, out)?;
    image::check(out, &dockerfile)?;
    println!(
        "{}: {} ({} bytes, layer {} bytes); import with: ctr images import {}",
        built.archive.display(),
        built.name,
        built.archive_bytes,
        built.layer_bytes,
        built.archive.display()
    );
    Ok(())
}

fn up(nodes: usize, router: RouterKind) -> anyhow::Result<()> {
    let lab = Lab::up(LabConfig { nodes, persistent: true, lan_clients: 0 })?;
    let spec = RouterSpec::default();
    // The lab outlives this process, so its router must too: forget the handles.
    match router {
        RouterKind::Bird => std::mem::forget(Bird::start(&lab, &spec)?),
        RouterKind::Frr => std::mem::forget(Frr::start(&lab, &spec)?),
        RouterKind::Gobgp => std::mem::forget(GoBgp::start(&lab, &spec)?),
        RouterKind::None => {}
    }
    println!("lab {} is up ({} nodes, router {router:?}); files in {}", lab.id(), nodes, lab.dir().display());
    for ns in lab.all() {
        println!("  ip netns exec {} bash", ns.name());
    }
    println!("remove it with: ferrolb-testbed down {}", lab.id());
    Ok(())
}

fn down(ids: &[String], all: bool, stale: bool) -> anyhow::Result<()> {
    if !all && !stale && ids.is_empty() {
        bail!("say which labs: ferrolb-testbed down ID… | --stale | --all");
    }
    let mut removed = if all || stale { ferrolb_cluster::remove_leftovers(all)? } else { Vec::new() };
    for id in ids {
        for name in netns::list_ours().into_iter().filter(|n| n.starts_with(&format!("{id}-"))) {
            netns::delete_by_name(&name)?;
            ferrolb_cluster::remove_real_node_leftovers(&name);
            removed.push(name);
        }
        let _ = std::fs::remove_dir_all(std::path::Path::new(lab::BASE_DIR).join(id));
    }
    ferrolb_cluster::node::host::release_stale()?;
    println!(
        "removed {} namespaces{}",
        removed.len(),
        if removed.is_empty() { String::new() } else { format!(": {}", removed.join(" ")) }
    );
    Ok(())
}

fn status() -> anyhow::Result<()> {
    let names = netns::list_ours();
    if names.is_empty() {
        println!("no ferrolb-testbed namespaces");
        return Ok(());
    }
    for name in names {
        let (pid, _) = netns::parse_owner(&name).unwrap_or((0, 0));
        let owner = match pid {
            0 => "persistent".to_string(),
            p if netns::pid_alive(p) => format!("owner pid {p}"),
            p => format!("STALE (owner pid {p} gone)"),
        };
        let ns = netns::Netns::existing(&name);
        println!("{name:<28} {owner:<28} processes {:?}", ns.pids());
    }
    Ok(())
}

/// Writes the speaker's hot-text linker script from callgrind `profiles`.
fn hot_text(profiles: &[std::path::PathBuf], out: &std::path::Path) -> anyhow::Result<()> {
    let texts = profiles
        .iter()
        .map(|p| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display())))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let patterns = ferrolb_release::hot_text::patterns(texts.iter().map(String::as_str));
    if patterns.is_empty() {
        bail!(
            "no function of ferrolb-speaker in {} profiles: were they written by callgrind of that binary?",
            profiles.len()
        );
    }
    std::fs::write(out, ferrolb_release::hot_text::linker_script(&patterns))
        .with_context(|| format!("writing {}", out.display()))?;
    println!("{}: {} functions from {} profiles", out.display(), patterns.len(), profiles.len());
    Ok(())
}
