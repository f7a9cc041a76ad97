//! `bench report`: the failover, L2 soak and BGP scale benches, each beside its peers in
//! the same run, written up as `BENCHMARKS.md` with SVG figures under `benchmarks/`: the
//! machine, the versions, the command to reproduce, and each goal of issue #15 beside
//! the figure it is judged on. Rendering is a pure function of the results.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::bgp_scale::{self, Outcome, ScaleResult, System as Speaker};
use super::failover::{self, Failure, Family, Row, Takeover};
use super::l2_soak::{self, Soaked};
use super::svg::{Axis, Plot};
use super::{Summary, mib, ms};
use crate::Error;

/// What `bench report` runs and where it writes.
#[derive(Debug, Clone)]
pub struct Params {
    /// Failover trials per system, failure and family.
    pub trials: usize,
    /// Length of each system's soak, seconds.
    pub soak_seconds: u64,
    /// BGP table sizes.
    pub sizes: Vec<u32>,
    /// BGP scale runs of every speaker at every size.
    pub runs: usize,
    /// Directory receiving `BENCHMARKS.md` and `benchmarks/`.
    pub out: PathBuf,
}

/// The figures' directory, relative to the report.
const FIGURES: &str = "benchmarks";
const TIMELINE: &str = "failover-timeline.svg";
const RSS: &str = "rss-vs-services.svg";
const ANSWERED: &str = "#009E73";
const LOST: &str = "#D55E00";

/// The figure of BGP table size `n`.
fn prefixes_figure(n: u32) -> String {
    format!("bgp-prefixes-{n}.svg")
}

/// The workspace root (the testbed crate's parent): where `BENCHMARKS.md` lives.
pub fn workspace_root() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir.parent().unwrap_or(crate_dir).to_path_buf()
}

/// Runs the benches, printing as they go, then writes the report into `p.out`. A BGP
/// speaker that failed is written as such, and the first failure is returned after.
pub fn run(p: &Params) -> Result<(), Error> {
    let figures = p.out.join(FIGURES);
    // Before an hour of measuring, not after.
    std::fs::create_dir_all(&figures).map_err(|e| io_at(&figures, e))?;
    let env = Environment::collect(&workspace_root());
    let fo = failover::measure(&failover::Params { trials: p.trials, family: None, failure: None })?;
    failover::print_tables(&fo);
    let soak = l2_soak::measure(p.soak_seconds)?;
    l2_soak::print_table(&soak);
    let scale = bgp_scale::measure_all(&p.sizes, &Speaker::ALL, p.runs)?;
    let report = Report { env, trials: p.trials, soak_seconds: p.soak_seconds, failover: fo, soak, scale };
    let rendered = render(&report);
    let md = p.out.join("BENCHMARKS.md");
    write_file(&md, &rendered.markdown)?;
    for (name, svg) in &rendered.figures {
        write_file(&figures.join(name), svg)?;
    }
    println!(
        "\nbench report: wrote {} and {} figures in {}",
        md.display(),
        rendered.figures.len(),
        figures.display()
    );
    report.scale.into_iter().find_map(|o| o.result.err()).map_or(Ok(()), Err)
}

/// An I/O error naming the file.
fn io_at(path: &Path, e: std::io::Error) -> Error {
    Error::Io(std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

fn write_file(path: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text).map_err(|e| io_at(path, e))
}

/// Where and with what the benches ran.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// When the run started, UTC.
    pub date: String,
    /// The command as given.
    pub command: String,
    /// Its arguments after the program name, to reproduce it with cargo.
    pub args: String,
    /// `uname -r`.
    pub kernel: String,
    /// CPU model.
    pub cpu: String,
    /// Logical CPUs.
    pub cores: usize,
    /// Total memory, in bytes.
    pub memory: Option<u64>,
    /// (software, version), "unknown" where the version could not be read.
    pub versions: Vec<(String, String)>,
    /// (which benches, binary): the ferrolb-speaker binaries measured.
    pub speakers: Vec<(String, PathBuf)>,
}

impl Environment {
    /// Reads the machine, the versions and the command line; what cannot be read says
    /// "unknown".
    pub fn collect(root: &Path) -> Environment {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let argv: Vec<String> = std::env::args().collect();
        let program = argv
            .first()
            .and_then(|a| Path::new(a).file_name())
            .map_or_else(|| "ferrolb-testbed".to_string(), |f| f.to_string_lossy().into_owned());
        let args = shell_words(argv.get(1..).unwrap_or_default());
        let mut speakers = Vec::new();
        let real = |b: PathBuf| std::fs::canonicalize(&b).unwrap_or(b);
        if let Ok(b) = crate::binary::newest("ferrolb-speaker") {
            speakers.push(("failover, L2 soak".to_string(), real(b)));
        }
        if let Ok((b, _)) = bgp_scale::ferrolb_binary() {
            speakers.push(("bgp-scale".to_string(), real(b)));
        }
        Environment {
            date: utc_date(SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()),
            command: format!("{program} {args}"),
            args,
            kernel: first_line("uname", &["-r"]),
            cpu: cpu_model(&cpuinfo).unwrap_or_else(|| "unknown".into()),
            cores: cpu_count(&cpuinfo),
            memory: mem_total(&meminfo),
            versions: versions(root),
            speakers,
        }
    }
}

/// Every version the report names.
fn versions(root: &Path) -> Vec<(String, String)> {
    let tools: [(&str, &str, &[&str]); 7] = [
        ("rustc", "rustc", &["-V"]),
        ("BIRD", "bird", &["--version"]),
        ("FRR", "vtysh", &["--version"]),
        ("GoBGP", "gobgpd", &["--version"]),
        ("ExaBGP", "exabgp", &["--version"]),
        ("keepalived", "keepalived", &["--version"]),
        ("stress-ng", "stress-ng", &["--version"]),
    ];
    let mut out = vec![("ferrolb".to_string(), ferrolb_version(root))];
    out.extend(tools.iter().map(|(name, prog, args)| (name.to_string(), first_line(prog, args))));
    out
}

/// `git rev-parse --short HEAD` of `root`, and whether its tree has uncommitted changes.
fn ferrolb_version(root: &Path) -> String {
    let root = root.to_string_lossy();
    let Some((head, _)) = output("git", &["-C", &root, "rev-parse", "--short", "HEAD"]) else {
        return "unknown".into();
    };
    let state = match output("git", &["-C", &root, "status", "--porcelain"]) {
        Some((s, _)) if s.trim().is_empty() => "clean tree",
        Some(_) => "uncommitted changes in the tree",
        None => "tree state unknown",
    };
    format!("{} ({state})", head.trim())
}

/// stdout and stderr of a command that succeeded.
fn output(program: &str, args: &[&str]) -> Option<(String, String)> {
    let out = Command::new(program)
        .args(args)
        // git status without taking the index lock: someone may be working in the tree.
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    Some((
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// The first non-empty line a command printed (stdout, else stderr: `bird --version`
/// writes there), or "unknown" when it failed.
fn first_line(program: &str, args: &[&str]) -> String {
    let first = |t: &str| t.lines().map(str::trim).find(|l| !l.is_empty()).map(String::from);
    output(program, args)
        .and_then(|(out, err)| first(&out).or_else(|| first(&err)))
        .unwrap_or_else(|| "unknown".into())
}

/// Arguments joined as a shell would read them back.
fn shell_words(args: &[String]) -> String {
    let quote = |a: &String| {
        let plain = !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./,=:@+".contains(c));
        if plain { a.clone() } else { format!("'{}'", a.replace('\'', r"'\''")) }
    };
    args.iter().map(quote).collect::<Vec<_>>().join(" ")
}

/// The `model name` of `/proc/cpuinfo`.
fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "model name").then(|| v.trim().to_string())
    })
}

/// Logical CPUs in `/proc/cpuinfo`.
fn cpu_count(cpuinfo: &str) -> usize {
    cpuinfo.lines().filter(|l| l.split(':').next().is_some_and(|k| k.trim() == "processor")).count()
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let kb: u64 =
        meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

/// Whether the speaker binary at `path` is a release or a debug build.
fn build_profile(path: &Path) -> &'static str {
    match path.parent().and_then(Path::file_name).and_then(|d| d.to_str()) {
        Some("release") => "release",
        Some("debug") => "debug",
        _ => "unknown (from $FERROLB_SPEAKER_BIN)",
    }
}

/// Seconds since the epoch as `2026-11-26 04:52 UTC`.
fn utc_date(secs: u64) -> String {
    let t = i64::try_from(secs).ok().and_then(|s| jiff::Timestamp::from_second(s).ok()).unwrap_or_default();
    t.strftime("%Y-%m-%d %H:%M UTC").to_string()
}

/// Everything measured, ready to write.
#[derive(Debug)]
pub struct Report {
    /// The machine and versions.
    pub env: Environment,
    /// Failover trials per system, failure and family.
    pub trials: usize,
    /// Length of each soak, seconds.
    pub soak_seconds: u64,
    /// `bench failover`'s results.
    pub failover: failover::Results,
    /// `bench l2-soak`'s results.
    pub soak: Vec<Soaked>,
    /// `bench bgp-scale`'s results, every speaker at every size.
    pub scale: Vec<Outcome>,
}

/// The report's files: the markdown and each figure (file name, SVG).
#[derive(Debug, Clone)]
pub struct Rendered {
    /// `BENCHMARKS.md`.
    pub markdown: String,
    /// (file name under `benchmarks/`, SVG document).
    pub figures: Vec<(String, String)>,
}

/// Whether a goal is met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The figure meets the goal.
    Met,
    /// It does not.
    NotMet,
    /// There is no figure (the measurement failed or did not run).
    Unmeasured,
}

impl Verdict {
    fn of(met: bool) -> Verdict {
        if met { Verdict::Met } else { Verdict::NotMet }
    }

    fn text(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::NotMet => "**not met**",
            Verdict::Unmeasured => "not measured",
        }
    }
}

/// A goal of issue #15, the figure it is judged on and the verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Goal {
    /// The goal, in words.
    pub goal: String,
    /// The figure measured.
    pub figure: String,
    /// Met or not.
    pub verdict: Verdict,
}

impl Goal {
    fn unmeasured(goal: String) -> Goal {
        Goal { goal, figure: "—".into(), verdict: Verdict::Unmeasured }
    }
}

/// Renders the report: pure, so tested without a lab.
pub fn render(r: &Report) -> Rendered {
    let mut figures = Vec::new();
    if let Some(svg) = timeline_svg(&r.failover) {
        figures.push((TIMELINE.to_string(), svg));
    }
    for n in sizes(&r.scale) {
        if let Some(svg) = prefixes_svg(&r.scale, n) {
            figures.push((prefixes_figure(n), svg));
        }
    }
    if let Some(svg) = rss_svg(&r.scale) {
        figures.push((RSS.to_string(), svg));
    }
    let names: Vec<&str> = figures.iter().map(|(n, _)| n.as_str()).collect();
    Rendered { markdown: markdown(r, &names), figures }
}

/// The BGP table sizes measured, in order.
fn sizes(scale: &[Outcome]) -> Vec<u32> {
    let mut v: Vec<u32> = scale.iter().map(|o| o.prefixes).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// `BENCHMARKS.md`; `figures` names the SVGs written beside it.
fn markdown(r: &Report, figures: &[&str]) -> String {
    let link = |name: &str, alt: &str| {
        if figures.contains(&name) { format!("\n![{alt}]({FIGURES}/{name})\n") } else { String::new() }
    };
    let goals =
        [failover_goals(&r.failover), soak_goals(&r.soak), scale_goals(&r.scale), memory_goals(&r.scale)];
    let mut md = format!(
        "# ferrolb benchmarks\n\n\
         Generated {} by `{}`: L2 failover, L2 soak and BGP scale, each beside the systems \
         ferrolb is measured against, in the same run on the same machine.\n\n",
        r.env.date, r.env.command
    );
    md.push_str(&goals_summary(&goals.concat()));
    md.push_str(&machine_section(&r.env));
    md.push_str(&failover_section(r, &goals[0], &link(TIMELINE, "L2 failover timeline")));
    md.push_str(&soak_section(r, &goals[1]));
    md.push_str(&scale_section(&r.scale, |n| {
        link(&prefixes_figure(n), &format!("{n} prefixes in BIRD's RIB"))
    }));
    md.push_str(&memory_section(&r.scale, &goals[3], &link(RSS, "peak RSS vs Services")));
    md
}

/// Goals as a table.
fn goal_table(goals: &[Goal]) -> String {
    let mut s = String::from("\n| Goal | Figure | Verdict |\n|---|---|---|\n");
    for g in goals {
        let _ = writeln!(s, "| {} | {} | {} |", g.goal, g.figure, g.verdict.text());
    }
    s
}

/// The verdicts up front: how many met, and which not, plainly.
fn goals_summary(goals: &[Goal]) -> String {
    let met = goals.iter().filter(|g| g.verdict == Verdict::Met).count();
    let mut s = format!("## Goals\n\n{met} of {} goals met.\n", goals.len());
    for (verdict, title) in [(Verdict::NotMet, "Not met"), (Verdict::Unmeasured, "Not measured")] {
        let list: Vec<&Goal> = goals.iter().filter(|g| g.verdict == verdict).collect();
        if !list.is_empty() {
            let _ = writeln!(s, "\n{title}:\n");
            for g in list {
                let _ = writeln!(s, "- {} — {}", g.goal, g.figure);
            }
        }
    }
    if met == goals.len() {
        s.push_str("\nEvery goal is met.\n");
    }
    s.push('\n');
    s
}

fn machine_section(env: &Environment) -> String {
    let memory =
        env.memory.map_or("unknown".into(), |b| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64));
    let mut s = String::from("## Machine and versions\n\n| | |\n|---|---|\n");
    let _ = writeln!(s, "| Kernel | {} |", env.kernel);
    let _ = writeln!(s, "| CPU | {}, {} logical CPUs |", env.cpu, env.cores);
    let _ = writeln!(s, "| Memory | {memory} |");
    for (name, version) in &env.versions {
        let _ = writeln!(s, "| {name} | {version} |");
    }
    for (benches, bin) in &env.speakers {
        let _ = writeln!(
            s,
            "| ferrolb-speaker ({benches}) | {} build, `{}` |",
            build_profile(bin),
            bin.display()
        );
    }
    let _ = write!(
        s,
        "\nTo reproduce, as root from the repository root (the L2 benches run the most recently \
         built ferrolb-speaker, bgp-scale the release build; built together with the controller and \
         the testbed, as `testbed/hot-text.sh` builds it: a speaker built alone unifies fewer features, \
         its code run at start may fall partly outside the hot-text section, and it may rest \
         higher):\n\n```sh\n\
         cargo build --release -p ferrolb-speaker -p ferrolb-controller -p ferrolb-testbed\n\
         cargo run --release -p ferrolb-testbed -- {}\n```\n\n",
        env.args
    );
    s
}

/// A duration in milliseconds, a decimal below 10 ms.
fn fmt_ms(d: Duration) -> String {
    let v = ms(d);
    if v < 10.0 { format!("{v:.1}") } else { format!("{v:.0}") }
}

/// `min | median | max` cells, or dashes.
fn summary_cells(s: Option<Summary>) -> String {
    s.map_or_else(
        || "— | — | —".into(),
        |s| format!("{} | {} | {}", fmt_ms(s.min), fmt_ms(s.median), fmt_ms(s.max)),
    )
}

/// The failover table's row of one (system, failure, family).
fn failover_row(r: &Row) -> String {
    let moved = r.moved();
    let stuck = moved.iter().filter(|m| m.is_none()).count();
    let moved: Vec<Duration> = moved.into_iter().flatten().collect();
    format!(
        "| {} | {} | {} | {} | {} | {stuck} of {} |",
        r.system.label(),
        r.failure,
        r.family(),
        summary_cells(Summary::of(&r.outages())),
        summary_cells(Summary::of(&moved)),
        r.trials.len()
    )
}

fn failover_section(r: &Report, goals: &[Goal], timeline: &str) -> String {
    let mut s = format!(
        "## L2 failover\n\n\
         The node owning an IPv4 and an IPv6 VIP fails, {} trials per system, failure and family, \
         each system in a lab of its own; the client probes each VIP every 10 ms. \
         *kill*: the owner's daemon is SIGKILLed, its link left up. *link*: the owner's LAN link \
         goes down, its daemon alive. Outage: the longest run of unanswered probes. Moved: from \
         the failure to the client's neighbour entry pointing at another node (`ip -ts monitor \
         neigh`). Times in ms.\n\n\
         | System | Failure | Family | Outage min | median | max | Moved min | median | max | Not moved |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
        r.trials
    );
    for row in &r.failover.rows {
        let _ = writeln!(s, "{}", failover_row(row));
    }
    s.push_str(&handover_text(&r.failover.handovers));
    s.push_str(&goal_table(goals));
    if !timeline.is_empty() {
        s.push_str("\nLink down, IPv4, first trial of each system: every probe, answered or lost, from the failure.\n");
        s.push_str(timeline);
    }
    s.push('\n');
    s
}

fn handover_text(handovers: &[failover::Handover]) -> String {
    if handovers.is_empty() {
        return String::new();
    }
    let zero = handovers.iter().filter(|h| h.lost() == 0).count();
    let mut s = format!(
        "\nferrolb SIGTERM handover (the owner's speaker SIGTERMed, then the VIPs leave its `lo`): \
         {zero} of {} trials with zero lost probes.\n\n| Trial | Exit code | Probes sent / lost |\n|---:|---:|---|\n",
        handovers.len()
    );
    for (i, h) in handovers.iter().enumerate() {
        let probes: Vec<String> =
            h.probes.iter().map(|(v, p)| format!("{} {} / {}", Family::of(*v), p.sent, p.lost())).collect();
        let exit = h.exit.map_or("none within 15 s".into(), |c| c.to_string());
        let _ = writeln!(s, "| {} | {exit} | {} |", i + 1, probes.join(", "));
    }
    s
}

/// ferrolb's outage goal per failure and family: median < 100 ms and max < 200 ms.
fn failover_goals(results: &failover::Results) -> Vec<Goal> {
    let mut goals = Vec::new();
    for failure in Failure::ALL {
        for family in Family::ALL {
            let goal =
                format!("ferrolb L2 failover ({failure}, {family}): outage median < 100 ms, max < 200 ms");
            let row = results.rows.iter().find(|r| {
                r.system == failover::System::Ferrolb && r.failure == failure && r.family() == family
            });
            goals.push(match row.and_then(|r| Summary::of(&r.outages())) {
                Some(s) => Goal {
                    goal,
                    figure: format!("median {} ms, max {} ms", fmt_ms(s.median), fmt_ms(s.max)),
                    verdict: Verdict::of(
                        s.median < Duration::from_millis(100) && s.max < Duration::from_millis(200),
                    ),
                },
                None => Goal::unmeasured(goal),
            });
        }
    }
    goals
}

fn soak_section(r: &Report, goals: &[Goal]) -> String {
    let mut s = format!(
        "## L2 soak\n\n\
         `stress-ng` keeps every core busy for {} s while the client probes each VIP every 10 ms. \
         Nothing fails, so every owner change is a false failover.\n\n\
         | System | VIP | Seconds | Probes sent | Lost | Longest gap (ms) | Owner changes |\n\
         |---|---|---:|---:|---:|---:|---:|\n",
        r.soak_seconds
    );
    for soaked in &r.soak {
        for v in &soaked.vips {
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {} | {} | {} | {} |",
                soaked.label(),
                v.vip,
                soaked.seconds,
                v.probes.sent,
                v.probes.lost(),
                fmt_ms(v.probes.max_outage()),
                v.changes.len()
            );
        }
    }
    s.push_str(&goal_table(goals));
    s.push('\n');
    s
}

/// ferrolb's soak goal: not one owner change.
fn soak_goals(soak: &[Soaked]) -> Vec<Goal> {
    let goal = "ferrolb L2 soak: zero false failovers".to_string();
    let Some(f) = soak.iter().find(|s| s.system == failover::System::Ferrolb) else {
        return vec![Goal::unmeasured(goal)];
    };
    let changes: usize = f.vips.iter().map(|v| v.changes.len()).sum();
    vec![Goal {
        goal,
        figure: format!("{changes} owner changes in {:.0} s ({} nodes)", f.seconds, f.nodes),
        verdict: Verdict::of(changes == 0),
    }]
}

/// The runs of `speaker` at size `n`, in the order they ran (failed ones too).
fn runs_of(scale: &[Outcome], speaker: Speaker, n: u32) -> impl Iterator<Item = &Outcome> {
    scale.iter().filter(move |o| o.system == speaker && o.prefixes == n)
}

/// The figures of `speaker` at size `n`: its measured run with the median time to RIB
/// (the lower middle one of an even count), if any run was measured.
fn result_of(scale: &[Outcome], speaker: Speaker, n: u32) -> Option<&ScaleResult> {
    let mut measured: Vec<&ScaleResult> =
        runs_of(scale, speaker, n).filter_map(|o| o.result.as_ref().ok()).collect();
    measured.sort_by_key(|r| r.to_rib);
    measured.get(measured.len().saturating_sub(1) / 2).copied()
}

/// `a`'s times over `b`'s (to RIB, to kernel, withdraw) at size `n`, each the median of
/// the ratios within the runs where both were measured (as `bench bgp-scale --runs`
/// prints it): the machine's noise moves both speakers of one run alike, and one slow
/// run does not decide a goal.
fn median_ratios(scale: &[Outcome], a: Speaker, b: Speaker, n: u32) -> Option<[f64; 3]> {
    let pairs: Vec<(&ScaleResult, &ScaleResult)> = runs_of(scale, a, n)
        .zip(runs_of(scale, b, n))
        .filter_map(|(x, y)| Some((x.result.as_ref().ok()?, y.result.as_ref().ok()?)))
        .collect();
    let median = |t: fn(&ScaleResult) -> Duration| {
        let ratios: Vec<f64> = pairs.iter().map(|(x, y)| ratio(t(x), t(y))).collect();
        Summary::of(&ratios).map(|s| s.median)
    };
    Some([median(TIMES[0])?, median(TIMES[1])?, median(TIMES[2])?])
}

/// The three times compared: to RIB, to kernel, withdraw.
const TIMES: [fn(&ScaleResult) -> Duration; 3] = [|r| r.to_rib, |r| r.to_kernel, |r| r.withdraw];

/// `a / b`, a zero `b` making it infinite (1 when both are zero).
fn ratio(a: Duration, b: Duration) -> f64 {
    match (a.is_zero(), b.is_zero()) {
        (true, true) => 1.0,
        (_, true) => f64::INFINITY,
        _ => a.as_secs_f64() / b.as_secs_f64(),
    }
}

fn bytes_per_prefix(r: &ScaleResult) -> f64 {
    r.bytes as f64 / f64::from(r.prefixes.max(1))
}

fn scale_section(scale: &[Outcome], figure: impl Fn(u32) -> String) -> String {
    let mut s = String::from(
        "## BGP scale\n\n\
         N /32 prefixes announced by one speaker on node1 to BIRD 2 on r1 (eBGP), each speaker \
         empty and Established before the clock starts; times run from the speaker's input change \
         (ferrolb: a static file of N Services; BIRD: an included file and `birdc configure`; \
         GoBGP: `gobgp mrt inject`; ExaBGP: API lines). BIRD as the speaker is the reference. \
         Times in ms; × BIRD is the ratio to BIRD→BIRD. The figures show, as steps, the networks in \
         r1's RIB just before the input change, then at each 5 ms poll once it returned.\n",
    );
    let runs = sizes(scale).first().map_or(0, |n| runs_of(scale, Speaker::Bird, *n).count());
    if runs > 1 {
        let _ = write!(
            s,
            "\nEvery speaker ran {runs} times at each size, the speakers in turn within a run. A row is \
             the speaker's run with the median time to RIB, its ratios to BIRD's such run; a goal \
             judges the median of the ratios within each run.\n"
        );
    }
    for n in sizes(scale) {
        let _ = write!(
            s,
            "\n### {n} prefixes\n\n\
             | Speaker | Input | To RIB | × BIRD | To kernel | × BIRD | Withdraw | × BIRD | Bytes/prefix | UPDATEs | Peak RSS (MiB) |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
        );
        let reference = result_of(scale, Speaker::Bird, n);
        let mut speakers: Vec<Speaker> = Vec::new();
        for o in scale.iter().filter(|o| o.prefixes == n) {
            if !speakers.contains(&o.system) {
                speakers.push(o.system);
            }
        }
        for speaker in speakers {
            // The median run; a speaker never measured shows its first failure.
            let row = match result_of(scale, speaker, n) {
                Some(r) => Some(scale_result_row(r, reference)),
                None => runs_of(scale, speaker, n).next().map(|o| scale_row(o, reference)),
            };
            if let Some(row) = row {
                let _ = writeln!(s, "{row}");
            }
        }
        s.push_str(&goal_table(&scale_goals_at(scale, n)));
        s.push_str(&figure(n));
    }
    s.push('\n');
    s
}

/// One speaker's row at one size; ratios to `reference` where there is one.
fn scale_row(o: &Outcome, reference: Option<&ScaleResult>) -> String {
    let r = match &o.result {
        Ok(r) => r,
        Err(e) => {
            let e = e.to_string().replace('|', "\\|").replace('\n', " ");
            return format!("| {} | failed: {e} | | | | | | | | | |", o.system.label(o.prefixes));
        }
    };
    scale_result_row(r, reference)
}

/// A measured speaker's row; ratios to `reference` where there is one.
fn scale_result_row(r: &ScaleResult, reference: Option<&ScaleResult>) -> String {
    let times: Vec<String> = TIMES
        .iter()
        .map(|t| {
            let x = reference.map_or("—".into(), |b| format!("{:.2}", ratio(t(r), t(b))));
            format!("{} | {x}", fmt_ms(t(r)))
        })
        .collect();
    format!(
        "| {} | {} | {} | {:.1} | {} | {} |",
        r.system,
        fmt_ms(r.input),
        times.join(" | "),
        bytes_per_prefix(r),
        r.updates.map_or("—".into(), |u| u.to_string()),
        r.rss.map_or("—".into(), |b| format!("{:.1}", mib(b)))
    )
}

/// ferrolb's BGP goals at every size.
fn scale_goals(scale: &[Outcome]) -> Vec<Goal> {
    sizes(scale).into_iter().flat_map(|n| scale_goals_at(scale, n)).collect()
}

/// ferrolb's BGP goals at size `n`: within 1.2× of BIRD→BIRD, ≥ 3× ahead of GoBGP and
/// ExaBGP (to RIB, to kernel, withdraw), ≤ 5.5 bytes per prefix.
fn scale_goals_at(scale: &[Outcome], n: u32) -> Vec<Goal> {
    let mut goals = Vec::new();
    let f = result_of(scale, Speaker::Ferrolb, n);
    let list = |x: [f64; 3]| x.map(|v| format!("{v:.2}×")).join(" / ");
    let goal = format!("{n} prefixes: ferrolb within 1.2× of BIRD→BIRD (to RIB / to kernel / withdraw)");
    goals.push(match median_ratios(scale, Speaker::Ferrolb, Speaker::Bird, n) {
        Some(x) => Goal { goal, figure: list(x), verdict: Verdict::of(x.iter().all(|v| *v <= 1.2)) },
        None => Goal::unmeasured(goal),
    });
    for other in [Speaker::Gobgp, Speaker::Exabgp] {
        let goal =
            format!("{n} prefixes: ferrolb ≥ 3× ahead of {} (to RIB / to kernel / withdraw)", other.name());
        goals.push(match median_ratios(scale, other, Speaker::Ferrolb, n) {
            Some(x) => Goal { goal, figure: list(x), verdict: Verdict::of(x.iter().all(|v| *v >= 3.0)) },
            None => Goal::unmeasured(goal),
        });
    }
    let goal = format!("{n} prefixes: ferrolb ≤ 5.5 bytes per prefix on the wire");
    goals.push(match f {
        Some(f) => {
            let b = bytes_per_prefix(f);
            Goal { goal, figure: format!("{b:.2} bytes"), verdict: Verdict::of(b <= 5.5) }
        }
        None => Goal::unmeasured(goal),
    });
    goals
}

/// ferrolb's peak RSS bounds (MiB) by Services: a size under a bound's size is held to it.
const RSS_BOUNDS: [(u32, u64); 3] = [(10_000, 30), (50_000, 120), (100_000, 250)];

fn memory_section(scale: &[Outcome], goals: &[Goal], figure: &str) -> String {
    let sizes = sizes(scale);
    let mut s = String::from(
        "## Memory\n\nRSS of each speaker, MiB: at rest (VmRSS when Established with no routes, \
         min / median / max over its runs), then the peak (VmHWM) by Services / prefixes.\n\n\
         | Speaker | At rest |",
    );
    for n in &sizes {
        let _ = write!(s, " {n} |");
    }
    let _ = write!(s, "\n|---|---:|{}\n", "---:|".repeat(sizes.len()));
    for speaker in Speaker::ALL {
        let mut cells = vec![idle_rss(scale, speaker).map_or("—".into(), |r| mib_spread(&r))];
        cells.extend(sizes.iter().map(|n| {
            result_of(scale, speaker, *n)
                .and_then(|r| r.rss)
                .map_or("—".into(), |b| format!("{:.1}", mib(b)))
        }));
        let _ = writeln!(s, "| {} | {} |", speaker.name(), cells.join(" | "));
    }
    s.push_str(&goal_table(goals));
    s.push_str(figure);
    s
}

/// ferrolb's bound at rest (MiB).
const IDLE_RSS_BOUND: u64 = 8;

/// `speaker`'s RSS at rest over all its runs.
fn idle_rss(scale: &[Outcome], speaker: Speaker) -> Option<super::Summary<u64>> {
    let xs: Vec<u64> = scale
        .iter()
        .filter(|o| o.system == speaker)
        .filter_map(|o| o.result.as_ref().ok()?.idle_rss)
        .collect();
    super::Summary::of(&xs)
}

/// "min / median / max" of byte counts, in MiB.
fn mib_spread(r: &super::Summary<u64>) -> String {
    format!("{:.1} / {:.1} / {:.1}", mib(r.min), mib(r.median), mib(r.max))
}

/// ferrolb's RSS at rest, judged on its largest; then its peak RSS goal at each size up
/// to 100 000.
fn memory_goals(scale: &[Outcome]) -> Vec<Goal> {
    let mut goals = Vec::new();
    let goal = format!("ferrolb RSS at rest < {IDLE_RSS_BOUND} MiB (Established, no routes; every run)");
    goals.push(match idle_rss(scale, Speaker::Ferrolb) {
        Some(r) => Goal {
            goal,
            figure: format!("{} MiB", mib_spread(&r)),
            verdict: Verdict::of(r.max < IDLE_RSS_BOUND << 20),
        },
        None => Goal::unmeasured(goal),
    });
    for n in sizes(scale) {
        let Some((at, bound)) = RSS_BOUNDS.iter().find(|(at, _)| n <= *at) else { continue };
        let goal = if n == *at {
            format!("ferrolb peak RSS < {bound} MiB at {n} Services")
        } else {
            format!("ferrolb peak RSS < {bound} MiB at {n} Services (the bound for {at})")
        };
        goals.push(match result_of(scale, Speaker::Ferrolb, n).and_then(|r| r.rss) {
            Some(b) => Goal {
                goal,
                figure: format!("{:.1} MiB", mib(b)),
                verdict: Verdict::of(b < bound * (1 << 20)),
            },
            None => Goal::unmeasured(goal),
        });
    }
    goals
}

/// Each probe of a trial: when it was sent, in ms from the failure, and whether it was
/// answered.
fn probe_times(t: &Takeover) -> Vec<(f64, bool)> {
    let lost = |i: u64| t.probes.gaps.iter().any(|g| i >= g.first && i < g.first + g.lost);
    let every = ms(t.probes.interval);
    (0..t.probes.sent).map(|i| (i as f64 * every - ms(t.failed_at), !lost(i))).collect()
}

/// The link-down, IPv4, first-trial timeline of every system: a row of probes each.
fn timeline_svg(results: &failover::Results) -> Option<String> {
    let rows: Vec<(&Row, &Takeover)> = results
        .rows
        .iter()
        .filter(|r| r.failure == Failure::LinkDown && r.family() == Family::V4)
        .filter_map(|r| Some((r, r.trials.first()?)))
        .collect();
    if rows.is_empty() {
        return None;
    }
    let longest = rows.iter().map(|(_, t)| ms(t.outage())).fold(0.0, f64::max);
    let (lo, hi) = (-100.0, longest + 200.0);
    let height = rows.len() as f64;
    // The first system at the top.
    let y_of = |i: usize| height - i as f64 - 0.5;
    let labels = rows.iter().enumerate().map(|(i, (r, _))| (y_of(i), r.system.label())).collect();
    let mut plot = Plot::new(
        "Link down, IPv4, first trial: the client's probes (every 10 ms)",
        Axis::new("time from the failure (ms)", lo, hi),
        Axis::labelled("", 0.0, height, labels),
    );
    let (mut answered, mut lost) = (Vec::new(), Vec::new());
    for (i, (_, t)) in rows.iter().enumerate() {
        for (at, ok) in probe_times(t).into_iter().filter(|(at, _)| (lo..=hi).contains(at)) {
            if ok { &mut answered } else { &mut lost }.push((at, y_of(i)));
        }
    }
    plot.marks("answered", ANSWERED, &answered);
    plot.marks("lost", LOST, &lost);
    plot.vline("failure", "black", 0.0);
    Some(plot.render())
}

/// Prefixes in BIRD's RIB over time at size `n`, a line per speaker.
fn prefixes_svg(scale: &[Outcome], n: u32) -> Option<String> {
    let series: Vec<(Speaker, &ScaleResult)> = scale
        .iter()
        .filter(|o| o.prefixes == n)
        .filter_map(|o| Some((o.system, o.result.as_ref().ok()?)))
        .filter(|(_, r)| !r.rib_series.is_empty())
        .collect();
    let end = series
        .iter()
        .filter_map(|(_, r)| r.rib_series.last())
        .map(|(t, _)| t.as_secs_f64())
        .fold(0.0, f64::max);
    let top = series.iter().flat_map(|(_, r)| r.rib_series.iter().map(|(_, c)| *c)).max()?.max(u64::from(n));
    let (unit, scale_by) = if end >= 2.0 { ("s", 1.0) } else { ("ms", 1000.0) };
    let mut plot = Plot::new(
        &format!("{n} prefixes: routes in BIRD's RIB from the input change"),
        Axis::new(&format!("time from the input change ({unit})"), 0.0, end * scale_by),
        Axis::new("prefixes in BIRD's RIB", 0.0, top as f64 * 1.05),
    );
    for (speaker, r) in &series {
        let points: Vec<(f64, f64)> =
            r.rib_series.iter().map(|(t, c)| (t.as_secs_f64() * scale_by, *c as f64)).collect();
        plot.line(speaker.name(), &steps(&points), false);
    }
    Some(plot.render())
}

/// `points` as steps: each value holds until the next is seen (between two polls nothing
/// is known, so no slope is drawn).
fn steps(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2);
    for (i, p) in points.iter().enumerate() {
        if let Some(prev) = i.checked_sub(1).and_then(|i| points.get(i)) {
            out.push((p.0, prev.1));
        }
        out.push(*p);
    }
    out
}

/// Peak RSS against the number of Services / prefixes, a line per speaker.
fn rss_svg(scale: &[Outcome]) -> Option<String> {
    let lines: Vec<(Speaker, Vec<(f64, f64)>)> = Speaker::ALL
        .iter()
        .map(|s| {
            let pts = sizes(scale)
                .into_iter()
                .filter_map(|n| Some((f64::from(n), mib(result_of(scale, *s, n)?.rss?))))
                .collect::<Vec<_>>();
            (*s, pts)
        })
        .filter(|(_, pts)| !pts.is_empty())
        .collect();
    let top = lines.iter().flat_map(|(_, p)| p.iter().map(|(_, y)| *y)).reduce(f64::max)?;
    let right = lines.iter().flat_map(|(_, p)| p.iter().map(|(x, _)| *x)).fold(0.0, f64::max);
    let mut plot = Plot::new(
        "Peak RSS of each speaker",
        Axis::new("Services / prefixes announced", 0.0, right * 1.05),
        Axis::new("peak RSS (MiB)", 0.0, top * 1.1),
    );
    for (speaker, pts) in &lines {
        plot.line(speaker.name(), pts, true);
    }
    Some(plot.render())
}

#[cfg(test)]
mod tests;
