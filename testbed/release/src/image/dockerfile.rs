//! What the repository's Dockerfile says of the published image: its final stage read
//! from the instructions the image depends on.

use ferrolb_lab::Error;

/// What the repository's Dockerfile puts in the published image's final stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dockerfile {
    /// The final stage's `FROM`.
    pub base: String,
    /// `ARG BINARIES`: the binaries copied into the image.
    pub binaries: Vec<String>,
    /// Where `COPY --from=build /out/ DIR` puts them (no trailing slash).
    pub bin_dir: String,
    /// `USER`, when the final stage sets one.
    pub user: Option<String>,
    /// `ENTRYPOINT` (exec form).
    pub entrypoint: Option<Vec<String>>,
    /// `CMD` (exec form).
    pub cmd: Option<Vec<String>>,
    /// `ENV KEY=VALUE` of the final stage.
    pub env: Vec<String>,
}

impl Dockerfile {
    /// The workspace's `Dockerfile`.
    pub fn workspace() -> Result<Self, Error> {
        let path = ferrolb_lab::binary::workspace_root().join("Dockerfile");
        Self::parse(&std::fs::read_to_string(&path)?)
    }

    /// Reads the instructions the image depends on (continuation lines are not needed).
    pub fn parse(text: &str) -> Result<Self, Error> {
        let bad = |what: &str| Error::Parse(format!("Dockerfile: {what}"));
        let exec_form = |instr: &str, rest: &str| {
            serde_json::from_str::<Vec<String>>(rest.trim())
                .map_err(|e| bad(&format!("{instr} {rest}: only the exec form [\"...\"] is supported ({e})")))
        };
        let mut binaries = None;
        let mut last_stage = Vec::new();
        for line in text.lines().map(str::trim) {
            if let Some(list) = line.strip_prefix("ARG BINARIES=") {
                binaries = Some(list.trim_matches('"').split_whitespace().map(String::from).collect());
            }
            if line.starts_with("FROM ") {
                last_stage.clear();
            }
            last_stage.push(line);
        }
        let mut d = Dockerfile {
            base: String::new(),
            binaries: binaries.ok_or_else(|| bad("no ARG BINARIES=\"...\""))?,
            bin_dir: String::new(),
            user: None,
            entrypoint: None,
            cmd: None,
            env: Vec::new(),
        };
        for line in last_stage {
            let (instr, rest) = line.split_once(' ').unwrap_or((line, ""));
            match instr {
                "FROM" => d.base = rest.split_whitespace().next().unwrap_or_default().to_owned(),
                "COPY" => {
                    if let Some(dest) = rest.strip_prefix("--from=build /out/ ") {
                        d.bin_dir = dest.trim().trim_end_matches('/').to_owned();
                    }
                }
                "USER" => d.user = Some(rest.trim().to_owned()),
                "ENTRYPOINT" => d.entrypoint = Some(exec_form(instr, rest)?),
                "CMD" => d.cmd = Some(exec_form(instr, rest)?),
                "ENV" => d.env.push(rest.trim().to_owned()),
                _ => {}
            }
        }
        if d.base.is_empty() {
            return Err(bad("no FROM"));
        }
        if d.bin_dir.is_empty() {
            return Err(bad("the final stage has no `COPY --from=build /out/ DIR`"));
        }
        Ok(d)
    }
}
