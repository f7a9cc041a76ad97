//! `ferrolb_build_info`: which build a binary is. Every binary exports it, with the
//! version and git revision its own build script stamped (buildinfo/build.rs), the same
//! as its `--version`.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Registers `ferrolb_build_info{version, revision} 1` in `registry`, which must carry
/// no prefix. Callers pass their own `env!("CARGO_PKG_VERSION")` and
/// `env!("FERROLB_REVISION")`: only the binary's crate has them.
pub fn register(registry: &mut Registry, version: &'static str, revision: &'static str) {
    let info = Family::<[(&'static str, &'static str); 2], Gauge>::default();
    info.get_or_create(&[("version", version), ("revision", revision)]).set(1);
    registry.register(
        "ferrolb_build_info",
        "1, labelled with the version and git revision of this build",
        info,
    );
}

/// The sample [`register`] puts in the OpenMetrics text.
pub fn sample(version: &str, revision: &str) -> String {
    format!("ferrolb_build_info{{version=\"{version}\",revision=\"{revision}\"}} 1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_one_sample_labelled_with_version_and_revision() {
        let mut registry = Registry::default();
        register(&mut registry, "0.1.0", "abc1234-dirty");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.lines().any(|l| l == sample("0.1.0", "abc1234-dirty")), "{text}");
        assert!(text.contains("# TYPE ferrolb_build_info gauge"), "{text}");
    }
}
