//! How a kustomize source file becomes a chart template: text edits that each must
//! match exactly where they are meant to (or the generator fails, naming the file), so
//! the template keeps the source's comments and layout and renders, with the default
//! values, exactly what kustomize renders.

use super::ChartError;

/// The namespace the kustomize sources name; the chart installs into the release's.
pub(super) const SOURCE_NAMESPACE: &str = "ferrolb-system";
/// The image the kustomize sources name (kustomization `images:` retags it).
pub(super) const SOURCE_IMAGE: &str = "example.invalid/ferrolb";

/// One edit of a source file (matched by the end of its path).
pub(super) enum Edit {
    /// Replace `from`, which must occur exactly once, with `to`.
    Replace { file: &'static str, from: &'static str, to: &'static str },
    /// Replace the YAML block under the line `line` (exactly once) with `.Values.<value>`;
    /// the block's own text is that value's default.
    Lift { file: &'static str, line: &'static str, value: &'static str },
}

/// Every edit, in the order they apply.
pub(super) const EDITS: &[Edit] = &[
    Edit::Replace {
        file: "base/controller.yaml",
        from: "  replicas: 2\n",
        to: "  replicas: {{ .Values.controller.replicas }}\n",
    },
    Edit::Lift { file: "base/controller.yaml", line: "        resources:", value: "controller.resources" },
    Edit::Lift { file: "base/speaker.yaml", line: "        resources:", value: "speaker.resources" },
    Edit::Lift { file: "base/speaker.yaml", line: "      nodeSelector:", value: "speaker.nodeSelector" },
    Edit::Lift { file: "base/speaker.yaml", line: "      tolerations:", value: "speaker.tolerations" },
    Edit::Replace {
        file: "base/controller.yaml",
        from: "      serviceAccountName: ferrolb-controller\n",
        to: "      serviceAccountName: ferrolb-controller\n\
{{- with .Values.imagePullSecrets }}\n      imagePullSecrets:{{ toYaml . | nindent 8 }}\n{{- end }}\n",
    },
    Edit::Replace {
        file: "base/speaker.yaml",
        from: "      serviceAccountName: ferrolb-speaker\n",
        to: "      serviceAccountName: ferrolb-speaker\n\
{{- with .Values.imagePullSecrets }}\n      imagePullSecrets:{{ toYaml . | nindent 8 }}\n{{- end }}\n",
    },
    Edit::Replace {
        file: "base/controller.yaml",
        from: "        - --metrics-addr=0.0.0.0:7472\n",
        to: "        - --metrics-addr=0.0.0.0:7472\n\
{{- with .Values.controller.extraArgs }}{{ toYaml . | nindent 8 }}{{- end }}\n",
    },
    Edit::Replace {
        file: "base/speaker.yaml",
        from: "        - --metrics-addr=0.0.0.0:9121\n",
        to: "        - --metrics-addr=0.0.0.0:9121\n\
{{- with .Values.speaker.extraArgs }}{{ toYaml . | nindent 8 }}{{- end }}\n",
    },
    Edit::Replace {
        file: "base/controller.yaml",
        from: "        env:\n",
        to: "        env:\n{{- with .Values.controller.logLevel }}\n        - name: RUST_LOG\n          value: {{ . | quote }}\n{{- end }}\n",
    },
    Edit::Replace {
        file: "base/speaker.yaml",
        from: "        env:\n",
        to: "        env:\n{{- with .Values.speaker.logLevel }}\n        - name: RUST_LOG\n          value: {{ . | quote }}\n{{- end }}\n",
    },
    Edit::Replace {
        file: "components/bgp/bgp-password-rbac.yaml",
        from: "  resourceNames: [bgp-auth]\n",
        to: "  resourceNames: {{ toJson .Values.bgp.passwordSecrets }}\n",
    },
    Edit::Replace {
        file: "components/monitoring/servicemonitor.yaml",
        from: MONITORING_LABELS,
        to: MONITORING_LABELS_TO,
    },
    Edit::Replace {
        file: "components/monitoring/prometheusrule.yaml",
        from: MONITORING_LABELS,
        to: MONITORING_LABELS_TO,
    },
    Edit::Replace {
        file: "components/monitoring/bootstrap/bootstrap-metrics.yaml",
        from: MONITORING_LABELS,
        to: MONITORING_LABELS_TO,
    },
];

const MONITORING_LABELS: &str = "    app.kubernetes.io/name: ferrolb\nspec:\n";
const MONITORING_LABELS_TO: &str = "    app.kubernetes.io/name: ferrolb\n\
{{- with .Values.monitoring.labels }}{{ toYaml . | nindent 4 }}{{- end }}\nspec:\n";

/// Source text made safe for Go templates (`{{` of alert annotations, dashboards), with
/// the release namespace for [`SOURCE_NAMESPACE`] outside comments.
pub(super) fn prepare(text: &str) -> String {
    let text = text.replace("{{", "{{ \"{{\" }}");
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with('#') {
            out.push_str(line);
        } else {
            out.push_str(&line.replace(SOURCE_NAMESPACE, "{{ .Release.Namespace }}"));
        }
    }
    out
}

/// The files of [`EDITS`] that none of `sources` (paths below `manifests/`) is: an edit
/// whose file was renamed or removed would otherwise be skipped without a word.
pub(super) fn unmatched(sources: &[String]) -> Vec<&'static str> {
    let mut files: Vec<&'static str> = EDITS
        .iter()
        .map(|e| match e {
            Edit::Replace { file, .. } | Edit::Lift { file, .. } => *file,
        })
        .filter(|f| !sources.iter().any(|s| s.ends_with(f)))
        .collect();
    files.sort_unstable();
    files.dedup();
    files
}

/// Every container's `image:` of [`SOURCE_IMAGE`] (any tag) becomes the chart's image,
/// with its pull policy; returns how many there were.
pub(super) fn images(text: &mut String) -> usize {
    let mut n = 0;
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let indent = &line[..indent_of(line)];
        let rest = line.trim();
        let ours = rest
            .strip_prefix("image: ")
            .is_some_and(|i| i == SOURCE_IMAGE || i.starts_with(&format!("{SOURCE_IMAGE}:")));
        if ours {
            n += 1;
            out.push_str(&format!(
                "{indent}image: {{{{ include \"ferrolb.image\" . }}}}\n\
                 {{{{- with .Values.image.pullPolicy }}}}\n{indent}imagePullPolicy: {{{{ . }}}}\n{{{{- end }}}}\n"
            ));
        } else {
            out.push_str(line);
        }
    }
    *text = out;
    n
}

/// Applies the [`EDITS`] of `file` to `text`; returns the lifted defaults as
/// (value path, YAML of the block).
pub(super) fn apply(file: &str, text: &mut String) -> Result<Vec<(&'static str, String)>, ChartError> {
    let mut lifted = Vec::new();
    for edit in EDITS {
        match *edit {
            Edit::Replace { file: f, from, to } if file.ends_with(f) => {
                let n = text.matches(from).count();
                if n != 1 {
                    return Err(ChartError::Source(format!("{file}: {from:?} occurs {n} times, not once")));
                }
                *text = text.replacen(from, to, 1);
            }
            Edit::Lift { file: f, line, value } if file.ends_with(f) => {
                let (rest, block) = lift(file, text, line, value)?;
                *text = rest;
                lifted.push((value, block));
            }
            _ => {}
        }
    }
    Ok(lifted)
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// Cuts the block under `key_line` out of `text` (the lines indented deeper, or list
/// items at its depth); returns the text with `.Values.<value>` in its place and the
/// block, dedented.
fn lift(file: &str, text: &str, key_line: &str, value: &str) -> Result<(String, String), ChartError> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let at: Vec<usize> = (0..lines.len()).filter(|&i| lines[i].trim_end_matches('\n') == key_line).collect();
    let [at] = at[..] else {
        return Err(ChartError::Source(format!(
            "{file}: the line {key_line:?} occurs {} times, not once",
            at.len()
        )));
    };
    let depth = indent_of(key_line);
    let mut end = at + 1;
    while end < lines.len() {
        let l = lines[end];
        let inside = !l.trim().is_empty()
            && (indent_of(l) > depth || (indent_of(l) == depth && l.trim_start().starts_with("- ")));
        if !inside {
            break;
        }
        end += 1;
    }
    if end == at + 1 {
        return Err(ChartError::Source(format!("{file}: nothing under {key_line:?} to lift")));
    }
    let cut = lines[at + 1..end].iter().map(|l| indent_of(l)).min().unwrap_or(0);
    let block: String = lines[at + 1..end].iter().map(|l| &l[cut.min(l.len())..]).collect();
    let mut out: String = lines[..=at].concat();
    out.push_str(&format!("{{{{- toYaml .Values.{value} | nindent {} }}}}\n", depth + 2));
    out.push_str(&lines[end..].concat());
    Ok((out, block))
}

/// Merges the container list items of a strategic-merge patch (`patch`, as kustomize
/// components write them: one container, one list) into the same list of `text`,
/// first (as kustomize merges them), under `condition`.
pub(super) fn merge_patch(
    file: &str,
    text: &str,
    patch: &str,
    condition: &str,
) -> Result<String, ChartError> {
    let bad = |why: &str| ChartError::Source(format!("{file}: patch not understood ({why})"));
    let lines: Vec<&str> = patch.split_inclusive('\n').collect();
    let containers =
        lines.iter().position(|l| l.trim_end() == "      containers:").ok_or_else(|| bad("no containers"))?;
    let name_line = lines.get(containers + 1).ok_or_else(|| bad("no container"))?;
    let list_line = lines.get(containers + 2).ok_or_else(|| bad("no list"))?;
    if !name_line.starts_with("      - name: ")
        || indent_of(list_line) != 8
        || !list_line.trim_end().ends_with(':')
    {
        return Err(bad("want `containers: [{name, LIST: [...]}]`"));
    }
    let items: String = lines[containers + 3..].concat();
    if items.lines().any(|l| !l.trim().is_empty() && indent_of(l) < 8) {
        return Err(bad("more than one list"));
    }
    // The same list in the target; its items go first, as a strategic merge puts them.
    let target: Vec<&str> = text.split_inclusive('\n').collect();
    let container = target
        .iter()
        .position(|l| l.trim_end() == name_line.trim_end())
        .ok_or_else(|| bad("its container is not in the target"))?;
    let list = (container..target.len())
        .find(|&i| target[i].trim_end() == list_line.trim_end())
        .ok_or_else(|| bad("its list is not in the target's container"))?;
    let end = list + 1;
    let mut out = target[..end].concat();
    out.push_str(&format!("{{{{- if {condition} }}}}\n{items}{{{{- end }}}}\n"));
    out.push_str(&target[end..].concat());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = "spec:\n  template:\n    spec:\n      tolerations:\n      - key: a\n        operator: Exists\n      containers:\n      - name: speaker\n        ports:\n        - name: metrics\n          containerPort: 9121\n        resources:\n          limits:\n            memory: 256Mi\n";

    #[test]
    fn a_lifted_block_becomes_its_value_and_its_text_the_default() {
        let (text, block) = lift("f.yaml", POD, "      tolerations:", "speaker.tolerations").unwrap();
        assert_eq!(block, "- key: a\n  operator: Exists\n");
        assert!(text.contains(
            "      tolerations:\n{{- toYaml .Values.speaker.tolerations | nindent 8 }}\n      containers:\n"
        ));
        let (text, block) = lift("f.yaml", POD, "        resources:", "speaker.resources").unwrap();
        assert_eq!(block, "limits:\n  memory: 256Mi\n");
        assert!(text.ends_with("        resources:\n{{- toYaml .Values.speaker.resources | nindent 10 }}\n"));
    }

    #[test]
    fn an_edit_that_no_longer_matches_fails_naming_the_file() {
        let e = lift("base/speaker.yaml", POD, "      nodeSelector:", "x").unwrap_err().to_string();
        assert!(e.contains("base/speaker.yaml") && e.contains("0 times"), "{e}");
        let mut text = POD.replace("  replicas", "");
        let e = apply("base/controller.yaml", &mut text).unwrap_err().to_string();
        assert!(e.contains("base/controller.yaml") && e.contains("occurs 0 times"), "{e}");
    }

    #[test]
    fn an_edit_whose_file_is_gone_is_named() {
        let all: Vec<String> = EDITS
            .iter()
            .map(|e| match e {
                Edit::Replace { file, .. } | Edit::Lift { file, .. } => (*file).to_owned(),
            })
            .collect();
        assert!(unmatched(&all).is_empty());
        let renamed: Vec<String> =
            all.iter().map(|f| f.replace("base/speaker.yaml", "base/speakers.yaml")).collect();
        assert_eq!(unmatched(&renamed), vec!["base/speaker.yaml"]);
    }

    #[test]
    fn a_patch_list_goes_first_under_its_condition() {
        let patch = "kind: DaemonSet\nspec:\n  template:\n    spec:\n      containers:\n      - name: speaker\n        ports:\n        - name: membership\n          containerPort: 7946\n";
        let out = merge_patch("p.yaml", POD, patch, ".Values.l2.enabled").unwrap();
        assert!(
            out.contains("        ports:\n{{- if .Values.l2.enabled }}\n        - name: membership\n          containerPort: 7946\n{{- end }}\n        - name: metrics\n"),
            "{out}"
        );
        let two_lists = patch.replace("        ports:\n", "        env: []\n        ports:\n");
        assert!(merge_patch("p.yaml", POD, &two_lists, "true").is_err());
    }

    #[test]
    fn go_template_braces_in_sources_stay_text_and_the_namespace_follows_the_release() {
        let src =
            "# in ferrolb-system\nmetadata: {namespace: ferrolb-system}\nsummary: '{{ $labels.peer }}'\n";
        let out = prepare(src);
        assert!(out.starts_with("# in ferrolb-system\n"));
        assert!(out.contains("namespace: {{ .Release.Namespace }}"));
        assert!(out.contains("'{{ \"{{\" }} $labels.peer }}'"));
    }
}
