//! The error sink of one object: field-level errors with the fix, and the checks of
//! value types (durations, IPs, selectors, communities, references) every kind shares.

use std::collections::BTreeSet;
use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;

use super::ValidationError;
use crate::community::Community;
use crate::duration::Duration;
use crate::selector::check_selector;

/// Error sink for one object.
pub(super) struct Check<'a> {
    kind: &'static str,
    pub(super) name: String,
    errors: &'a mut Vec<ValidationError>,
}

impl<'a> Check<'a> {
    pub(super) fn new<K: ResourceExt>(
        kind: &'static str,
        obj: &K,
        errors: &'a mut Vec<ValidationError>,
    ) -> Self {
        Self { kind, name: obj.name_any(), errors }
    }

    pub(super) fn err(
        &mut self,
        field: impl Into<String>,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) {
        self.errors.push(ValidationError {
            kind: self.kind,
            name: self.name.clone(),
            field: field.into(),
            problem: problem.into(),
            fix: fix.into(),
        });
    }

    pub(super) fn duration(&mut self, field: &str, value: &str) -> Option<Duration> {
        match value.parse::<Duration>() {
            Ok(d) => Some(d),
            Err(e) => {
                self.err(field, e.to_string(), "write a duration such as \"90s\", \"1m\" or \"300ms\"");
                None
            }
        }
    }

    pub(super) fn selectors(&mut self, field: &str, selectors: &[LabelSelector]) {
        for (i, sel) in selectors.iter().enumerate() {
            self.selector(&format!("{field}[{i}]"), sel);
        }
    }

    pub(super) fn selector(&mut self, field: &str, selector: &LabelSelector) {
        for (sub, problem, fix) in check_selector(selector) {
            self.err(format!("{field}{sub}"), problem, fix);
        }
    }

    pub(super) fn communities(&mut self, field: &str, communities: &[String]) {
        for (i, s) in communities.iter().enumerate() {
            if s.trim() != s {
                self.err(format!("{field}[{i}]"), format!("{s:?} has surrounding spaces"), "remove them");
            } else if let Err(e) = s.parse::<Community>() {
                self.err(
                    format!("{field}[{i}]"),
                    e.to_string(),
                    "write e.g. \"64512:100\", \"large:64512:1:2\" or \"no-export\"",
                );
            }
        }
    }

    pub(super) fn references(
        &mut self,
        field: &str,
        refs: &[String],
        known: &BTreeSet<String>,
        target: &str,
    ) {
        for (i, r) in refs.iter().enumerate() {
            if !known.contains(r) {
                self.err(
                    format!("{field}[{i}]"),
                    format!("no {target} is named {r:?}"),
                    format!("create the {target} or correct the name"),
                );
            }
        }
    }

    pub(super) fn ip(&mut self, field: &str, value: &str) -> Option<IpAddr> {
        match value.parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                self.err(
                    field,
                    format!("{value:?} is not an IP address"),
                    "write an IPv4 (192.0.2.1) or IPv6 (2001:db8::1) address",
                );
                None
            }
        }
    }
}
