//! Where and with what the benches ran: the machine, the versions, the command line,
//! read once before the run and written as the report's machine section.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::bgp_scale;

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
        if let Ok(b) = ferrolb_lab::binary::newest("ferrolb-speaker") {
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
pub(super) fn versions(root: &Path) -> Vec<(String, String)> {
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
pub(super) fn ferrolb_version(root: &Path) -> String {
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
pub(super) fn output(program: &str, args: &[&str]) -> Option<(String, String)> {
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
pub(super) fn first_line(program: &str, args: &[&str]) -> String {
    let first = |t: &str| t.lines().map(str::trim).find(|l| !l.is_empty()).map(String::from);
    output(program, args)
        .and_then(|(out, err)| first(&out).or_else(|| first(&err)))
        .unwrap_or_else(|| "unknown".into())
}

/// Arguments joined as a shell would read them back.
pub(super) fn shell_words(args: &[String]) -> String {
    let quote = |a: &String| {
        let plain = !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./,=:@+".contains(c));
        if plain { a.clone() } else { format!("'{}'", a.replace('\'', r"'\''")) }
    };
    args.iter().map(quote).collect::<Vec<_>>().join(" ")
}

/// The `model name` of `/proc/cpuinfo`.
pub(super) fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "model name").then(|| v.trim().to_string())
    })
}

/// Logical CPUs in `/proc/cpuinfo`.
pub(super) fn cpu_count(cpuinfo: &str) -> usize {
    cpuinfo.lines().filter(|l| l.split(':').next().is_some_and(|k| k.trim() == "processor")).count()
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
pub(super) fn mem_total(meminfo: &str) -> Option<u64> {
    let kb: u64 =
        meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.split_whitespace().next()?.parse().ok()?;
    Some(kb * 1024)
}

/// Whether the speaker binary at `path` is a release or a debug build.
pub(super) fn build_profile(path: &Path) -> &'static str {
    match path.parent().and_then(Path::file_name).and_then(|d| d.to_str()) {
        Some("release") => "release",
        Some("debug") => "debug",
        _ => "unknown (from $FERROLB_SPEAKER_BIN)",
    }
}

/// Seconds since the epoch as `2026-11-26 04:52 UTC`.
pub(super) fn utc_date(secs: u64) -> String {
    let t = i64::try_from(secs).ok().and_then(|s| jiff::Timestamp::from_second(s).ok()).unwrap_or_default();
    t.strftime("%Y-%m-%d %H:%M UTC").to_string()
}

pub(super) fn machine_section(env: &Environment) -> String {
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
