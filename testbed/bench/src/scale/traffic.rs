//! What each of ferrolb's components received from the apiserver over a window: watch
//! events and response bytes, read from its own `ferrolb_kube_client_*` counters (the
//! apiserver counts watch events per resource for every watcher together, and its audit
//! log records a watch once, when it starts).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use ferrolb_cluster::ferrolb;
use ferrolb_lab::{Lab, addressing, client};

/// One component's counters: (verb, resource) → its sample.
pub type Counters = BTreeMap<(String, String), Sample>;

/// What one component received for one verb and resource.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// Response bytes.
    pub bytes: u64,
    /// Watch events, bookmarks included.
    pub events: u64,
    /// Of which bookmarks (no change).
    pub bookmarks: u64,
}

/// Each component's counters at one moment, by the name [`super::Requests::who`] gives it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot(pub BTreeMap<String, Counters>);

/// What one component received over a window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Received {
    /// Watch events (bookmarks included).
    pub events: u64,
    /// Of which bookmarks, which carry no change.
    pub bookmarks: u64,
    /// The events that carry a change (all but bookmarks), by resource (those with any).
    pub changes_by: BTreeMap<String, u64>,
    /// Bytes of those events.
    pub watch_bytes: u64,
    /// Bytes of every other answer (lists, gets, writes' answers).
    pub other_bytes: u64,
    /// Of which lists', by resource, as the apiserver sent them (compressed when large).
    pub list_bytes_by: BTreeMap<String, u64>,
}

impl Received {
    /// Every byte.
    pub fn bytes(&self) -> u64 {
        self.watch_bytes + self.other_bytes
    }
}

impl Snapshot {
    /// The counters of the controller and the speakers of lab nodes `1..=speakers`;
    /// a component whose metrics cannot be read is left out.
    pub fn read(lab: &Lab, speakers: usize, controller_node: usize) -> Snapshot {
        let mut out = BTreeMap::new();
        let controller =
            SocketAddr::new(addressing::node_ip(controller_node), ferrolb::CONTROLLER_METRICS_PORT);
        let targets = std::iter::once(("controller".to_owned(), controller)).chain((1..=speakers).map(|i| {
            (super::speaker_name(i), SocketAddr::new(addressing::node_ip(i), super::SPEAKER_METRICS_PORT))
        }));
        for (who, addr) in targets {
            if let Ok(text) = client::http_get(lab.client(), addr, "/metrics", Duration::from_secs(2)) {
                out.insert(who, parse(&text));
            }
        }
        Snapshot(out)
    }

    /// What each component received since `before` (a component absent from `before`,
    /// e.g. restarted since, counts from its start).
    pub fn since(&self, before: &Snapshot) -> BTreeMap<String, Received> {
        let empty = Counters::new();
        self.0
            .iter()
            .map(|(who, now)| {
                let then = before.0.get(who).unwrap_or(&empty);
                let mut r = Received::default();
                for ((verb, resource), s) in now {
                    let s0 = then.get(&(verb.clone(), resource.clone())).copied().unwrap_or_default();
                    let bytes = s.bytes.saturating_sub(s0.bytes);
                    let events = s.events.saturating_sub(s0.events);
                    let bookmarks = s.bookmarks.saturating_sub(s0.bookmarks);
                    match verb.as_str() {
                        "watch" => {
                            r.events += events;
                            r.bookmarks += bookmarks;
                            r.watch_bytes += bytes;
                            if events > bookmarks {
                                *r.changes_by.entry(resource.clone()).or_default() += events - bookmarks;
                            }
                        }
                        _ => {
                            r.other_bytes += bytes;
                            if verb == "list" && bytes > 0 {
                                *r.list_bytes_by.entry(resource.clone()).or_default() += bytes;
                            }
                        }
                    }
                }
                (who.clone(), r)
            })
            .collect()
    }
}

/// The `ferrolb_kube_client_*` samples of a metrics text (events summed over their
/// types; a build from before the `type` label counts bookmarks as changes).
pub fn parse(text: &str) -> Counters {
    let mut out = Counters::new();
    for line in text.lines() {
        let (which, rest) = if let Some(rest) = line.strip_prefix("ferrolb_kube_client_received_bytes_total{")
        {
            (0, rest)
        } else if let Some(rest) = line.strip_prefix("ferrolb_kube_client_watch_events_total{") {
            (1, rest)
        } else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else { continue };
        let Ok(value) = value.trim().parse::<f64>() else { continue };
        let label = |name: &str| {
            labels.split(',').find_map(|kv| kv.strip_prefix(name)?.strip_prefix("=\"")?.strip_suffix('"'))
        };
        let (Some(verb), Some(resource)) = (label("verb"), label("resource")) else { continue };
        let entry = out.entry((verb.to_owned(), resource.to_owned())).or_default();
        match which {
            0 => entry.bytes = value as u64,
            _ => {
                entry.events += value as u64;
                if label("type") == Some("BOOKMARK") {
                    entry.bookmarks += value as u64;
                }
            }
        }
    }
    out
}

/// The largest of the speakers' figures, by `f`.
pub fn max_speaker(received: &BTreeMap<String, Received>, f: impl Fn(&Received) -> u64) -> Option<u64> {
    received.iter().filter(|(who, _)| who.starts_with("speaker")).map(|(_, r)| f(r)).max()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# TYPE ferrolb_kube_client_received_bytes counter
ferrolb_kube_client_received_bytes_total{verb=\"watch\",resource=\"services\"} 1200
ferrolb_kube_client_received_bytes_total{verb=\"list\",resource=\"services\"} 90000
ferrolb_kube_client_watch_events_total{verb=\"watch\",resource=\"services\",type=\"ADDED\"} 3
ferrolb_kube_client_watch_events_total{verb=\"watch\",resource=\"services\",type=\"BOOKMARK\"} 1
ferrolb_speaker_heap_bytes 5
";

    #[test]
    fn samples_are_read_by_verb_and_resource_and_windows_subtract() {
        let now = parse(TEXT);
        let sample = |bytes, events, bookmarks| Sample { bytes, events, bookmarks };
        assert_eq!(now[&("watch".into(), "services".into())], sample(1200, 4, 1));
        assert_eq!(now[&("list".into(), "services".into())], sample(90000, 0, 0));
        let mut then = now.clone();
        then.insert(("watch".into(), "services".into()), sample(200, 1, 0));
        let before = Snapshot([("speaker node1".to_owned(), then)].into());
        let after =
            Snapshot([("speaker node1".to_owned(), now.clone()), ("controller".to_owned(), now)].into());
        let got = after.since(&before);
        let by = |n| [("services".to_owned(), n)].into();
        let speaker = Received {
            events: 3,
            bookmarks: 1,
            changes_by: by(2),
            watch_bytes: 1000,
            other_bytes: 0,
            list_bytes_by: BTreeMap::new(),
        };
        assert_eq!(got["speaker node1"], speaker);
        // Absent before (restarted): all of it.
        let all = Received {
            events: 4,
            bookmarks: 1,
            changes_by: by(3),
            watch_bytes: 1200,
            other_bytes: 90000,
            list_bytes_by: by(90000),
        };
        assert_eq!(got["controller"], all);
        assert_eq!(max_speaker(&got, Received::bytes), Some(1000));
    }
}
