//! YAML object streams (API.md "Static object files and checkpoints"): documents
//! separated by `---` or a `kind: List`, exactly as `kubectl get -o yaml` prints them.

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use serde::Serialize;
use serde_json::Value;

use crate::crd::{
    API_VERSION, BfdProfile, BgpAdvertisement, BgpPeer, ControlPlaneVip, IpAddressPool, L2Advertisement,
    ServiceAnnouncement,
};
use crate::service_fields::ServiceFields;
use crate::validate::{Config, Origin, ValidConfig, ValidationError};

/// One object of a stream, typed.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Object {
    /// ferrolb.io IPAddressPool.
    IpAddressPool(Box<IpAddressPool>),
    /// ferrolb.io BGPPeer.
    BgpPeer(Box<BgpPeer>),
    /// ferrolb.io BGPAdvertisement.
    BgpAdvertisement(Box<BgpAdvertisement>),
    /// ferrolb.io L2Advertisement.
    L2Advertisement(Box<L2Advertisement>),
    /// ferrolb.io BFDProfile.
    BfdProfile(Box<BfdProfile>),
    /// ferrolb.io ControlPlaneVIP.
    ControlPlaneVip(Box<ControlPlaneVip>),
    /// ferrolb.io ServiceAnnouncement.
    ServiceAnnouncement(Box<ServiceAnnouncement>),
    /// core/v1 Node.
    Node(Box<Node>),
    /// core/v1 Service.
    Service(Box<Service>),
    /// discovery.k8s.io/v1 EndpointSlice.
    EndpointSlice(Box<EndpointSlice>),
}

macro_rules! object_from {
    ($($variant:ident($ty:ty)),* $(,)?) => {$(
        impl From<$ty> for Object {
            fn from(o: $ty) -> Self {
                Self::$variant(o.into())
            }
        }
    )*};
}

object_from!(
    IpAddressPool(IpAddressPool),
    BgpPeer(BgpPeer),
    BgpAdvertisement(BgpAdvertisement),
    L2Advertisement(L2Advertisement),
    BfdProfile(BfdProfile),
    ControlPlaneVip(ControlPlaneVip),
    ServiceAnnouncement(ServiceAnnouncement),
    Node(Node),
    Service(Service),
    EndpointSlice(EndpointSlice),
);

impl Config {
    /// The objects of this configuration, in a stable order, e.g. to write a checkpoint.
    pub fn to_objects(&self) -> Vec<Object> {
        let mut out: Vec<Object> = Vec::new();
        out.extend(self.control_plane_vips.iter().cloned().map(Object::from));
        out.extend(self.bfd_profiles.iter().cloned().map(Object::from));
        out.extend(self.peers.iter().cloned().map(Object::from));
        out.extend(self.pools.iter().cloned().map(Object::from));
        out.extend(self.bgp_advertisements.iter().cloned().map(Object::from));
        out.extend(self.l2_advertisements.iter().cloned().map(Object::from));
        out
    }
}

impl Object {
    /// Kind as written in `kind:`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::IpAddressPool(_) => "IPAddressPool",
            Self::BgpPeer(_) => "BGPPeer",
            Self::BgpAdvertisement(_) => "BGPAdvertisement",
            Self::L2Advertisement(_) => "L2Advertisement",
            Self::BfdProfile(_) => "BFDProfile",
            Self::ControlPlaneVip(_) => "ControlPlaneVIP",
            Self::ServiceAnnouncement(_) => "ServiceAnnouncement",
            Self::Node(_) => "Node",
            Self::Service(_) => "Service",
            Self::EndpointSlice(_) => "EndpointSlice",
        }
    }

    /// `metadata.name`, or `metadata.generateName` when there is no name.
    pub fn name(&self) -> String {
        match self {
            Self::IpAddressPool(o) => o.name_any(),
            Self::BgpPeer(o) => o.name_any(),
            Self::BgpAdvertisement(o) => o.name_any(),
            Self::L2Advertisement(o) => o.name_any(),
            Self::BfdProfile(o) => o.name_any(),
            Self::ControlPlaneVip(o) => o.name_any(),
            Self::ServiceAnnouncement(o) => o.name_any(),
            Self::Node(o) => o.name_any(),
            Self::Service(o) => o.name_any(),
            Self::EndpointSlice(o) => o.name_any(),
        }
    }
}

/// Where an object sits in a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Source {
    /// Document number, counting from 1.
    pub document: usize,
    /// Index in `items` when the document is a `kind: List`.
    pub item: Option<usize>,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "document {}", self.document)?;
        if let Some(i) = self.item {
            write!(f, ", items[{i}]")?;
        }
        Ok(())
    }
}

/// A parsed stream: objects in file order, and warnings about ignored documents.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObjectStream {
    /// Objects with their place in the file.
    pub objects: Vec<(Source, Object)>,
    /// One line per ignored document (unknown kind), to log.
    pub warnings: Vec<String>,
}

/// Why a stream could not be read, validated or written.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// Reading or writing the file failed.
    #[error("{file}: {source}")]
    Io {
        /// File name.
        file: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The YAML itself is malformed.
    #[error("{file}: invalid YAML: {message}")]
    Yaml {
        /// File name.
        file: String,
        /// Parser message, with line and column.
        message: String,
    },
    /// A document is not a valid object of its kind.
    #[error("{file}: {at}: {path}: {message}")]
    Object {
        /// File name.
        file: String,
        /// Document (and List item).
        at: Source,
        /// Field path inside the object, e.g. `spec.addresses[2]`.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Objects decoded but the configuration they form is invalid.
    #[error("{file}: invalid configuration:{}", list_errors(errors))]
    Invalid {
        /// File name.
        file: String,
        /// Each error with the place of the object it is about.
        errors: Vec<(Option<Source>, ValidationError)>,
    },
    /// Serializing an object failed.
    #[error("cannot write {kind} {name:?} as YAML: {message}")]
    Serialize {
        /// Kind of the object.
        kind: &'static str,
        /// Name of the object.
        name: String,
        /// Serializer message.
        message: String,
    },
}

fn list_errors(errors: &[(Option<Source>, ValidationError)]) -> String {
    errors
        .iter()
        .map(|(src, e)| match src {
            Some(s) => format!("\n  {s}: {e}"),
            None => format!("\n  {e}"),
        })
        .collect()
}

/// Reads and parses a stream file; see [`parse_stream`].
pub fn read_stream(path: &Path) -> Result<ObjectStream, StreamError> {
    let file = path.display().to_string();
    let text = fs::read_to_string(path).map_err(|source| StreamError::Io { file: file.clone(), source })?;
    parse_stream(&file, &text)
}

/// Parses a stream; `file` only names the source in errors and warnings.
///
/// The whole stream is rejected on the first invalid document, so a half-read file never
/// replaces the last good one. Large streams are parsed on every core, in contiguous runs
/// of documents joined in file order: the objects, warnings and the first error come out
/// exactly as a single pass would give them.
pub fn parse_stream(file: &str, text: &str) -> Result<ObjectStream, StreamError> {
    parse_stream_with(file, text, &Objects).map(|(stream, _)| stream)
}

/// The objects a reader left in the stream, and what it took (in file order).
pub type Taken<T> = (ObjectStream, Vec<(Source, T)>);

/// Parses a stream like [`parse_stream`], handing what a load balancer reads of each
/// Service to `take`, on the thread that decoded it; what `take` makes of them comes
/// back in the second list, in file order, and every other object stays in the stream.
/// A Service in a plain document is read without building it as a Kubernetes object
/// (see [`crate::service_fields`]), and the 50k Services of a static file are never all
/// in memory at once: they are read and converted on every core.
pub fn parse_stream_services<T: Send>(
    file: &str,
    text: &str,
    take: impl Fn(ServiceFields<'_>) -> T + Sync,
) -> Result<Taken<T>, StreamError> {
    parse_stream_with(file, text, &Services(take))
}

/// How a parse hands over what it decoded.
trait Taker: Sync {
    /// What it makes of what it takes.
    type Out: Send;
    /// What it takes straight from a document the fast reader read (and was decoded by
    /// nobody else), if it can.
    fn node(&self, node: &crate::fast_yaml::Node<'_>) -> Option<Self::Out>;
    /// What it makes of `object`, or the object back to keep in the stream.
    fn object(&self, object: Object) -> Result<Self::Out, Object>;
}

/// Takes nothing: every object stays in the stream.
struct Objects;

impl Taker for Objects {
    type Out = ();

    fn node(&self, _: &crate::fast_yaml::Node<'_>) -> Option<()> {
        None
    }

    fn object(&self, object: Object) -> Result<(), Object> {
        Err(object)
    }
}

/// Takes the Services, as [`ServiceFields`].
struct Services<F>(F);

impl<T: Send, F: Fn(ServiceFields<'_>) -> T + Sync> Taker for Services<F> {
    type Out = T;

    fn node(&self, node: &crate::fast_yaml::Node<'_>) -> Option<T> {
        let is_service =
            node.str_field("apiVersion") == Some("v1") && node.str_field("kind") == Some("Service");
        is_service.then(|| crate::service_fields::from_node(node)).flatten().map(&self.0)
    }

    fn object(&self, object: Object) -> Result<T, Object> {
        match object {
            Object::Service(s) => Ok(self.0(ServiceFields::from(*s))),
            o => Err(o),
        }
    }
}

fn parse_stream_with<K: Taker>(file: &str, text: &str, take: &K) -> Result<Taken<K::Out>, StreamError> {
    let docs = split_documents(text);
    let threads = std::thread::available_parallelism().map_or(1, usize::from).min(MAX_THREADS);
    if threads < 2 || docs.len() < PARALLEL_FROM {
        return parse_documents(file, 0, &docs, take);
    }
    let per_thread = docs.len().div_ceil(threads);
    let parts: Vec<Result<Taken<K::Out>, StreamError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = docs
            .chunks(per_thread)
            .enumerate()
            .map(|(k, run)| scope.spawn(move || parse_documents(file, k * per_thread, run, take)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    });
    let mut out = ObjectStream::default();
    let mut taken = Vec::new();
    for part in parts {
        let (part, t) = part?;
        out.objects.extend(part.objects);
        out.warnings.extend(part.warnings);
        taken.extend(t);
    }
    Ok((out, taken))
}

/// Below this many documents one thread parses the stream: threads cost more than they save.
const PARALLEL_FROM: usize = 512;
/// A static file is read beside the speaker's own work: leave it some cores on big hosts.
const MAX_THREADS: usize = 4;

/// Parses documents `docs`, the first of which is document `skip + 1` of the file,
/// handing what it decodes to `take` (see [`parse_stream_services`]).
fn parse_documents<K: Taker>(
    file: &str,
    skip: usize,
    docs: &[(usize, &str)],
    take: &K,
) -> Result<Taken<K::Out>, StreamError> {
    let mut out = ObjectStream::default();
    let mut taken = Vec::new();
    let mut put = |source: Source, taken_or_not: Result<K::Out, Object>| match taken_or_not {
        Ok(t) => taken.push((source, t)),
        Err(object) => out.objects.push((source, object)),
    };
    let mut warnings = Vec::new();
    for (i, &(first_line, chunk)) in docs.iter().enumerate() {
        let number = skip + i + 1;
        let source = Source { document: number, item: None };
        let doc: Value = match crate::fast_yaml::parse_node(chunk) {
            Some(node) => {
                if let Some(t) = take.node(&node) {
                    put(source, Ok(t));
                    continue;
                }
                match decode_fast(&node) {
                    Some(object) => {
                        put(source, take.object(object));
                        continue;
                    }
                    None => node.into_value(),
                }
            }
            None => serde_saphyr::from_str(chunk).map_err(|e| StreamError::Yaml {
                file: file.to_owned(),
                message: yaml_message(source, first_line, &e),
            })?,
        };
        if doc.is_null() {
            continue; // an empty document, e.g. `---` twice
        }
        if doc.get("kind").and_then(Value::as_str) == Some("List") {
            let Some(Value::Array(items)) = doc.get("items").cloned() else {
                return Err(object_error(file, source, "items", "a List needs an items array"));
            };
            for (j, item) in items.into_iter().enumerate() {
                let source = Source { document: number, item: Some(j) };
                decode_into(file, source, item, &mut warnings, &mut |s, o| put(s, take.object(o)))?;
            }
        } else {
            decode_into(file, source, doc, &mut warnings, &mut |s, o| put(s, take.object(o)))?;
        }
    }
    out.warnings = warnings;
    Ok((out, taken))
}

/// Splits at `---` lines into (first line number, text) per document, numbering documents
/// the way users count them: empty ones between separators count, a leading `---` does
/// not start an empty first document. Splitting here rather than in the YAML parser keeps
/// document numbers right, since the parser drops empty documents.
pub fn split_documents(text: &str) -> Vec<(usize, &str)> {
    let bytes = text.as_bytes();
    let mut docs = Vec::new();
    let mut start = 0;
    let mut start_line = 1;
    let mut seen_separator = false;
    // Line number of `counted`, kept by counting line breaks from one separator to the
    // next: only lines starting with `---` are looked at (a 32 MB file of 50k Services
    // is split in a few milliseconds).
    let (mut line, mut counted) = (1, 0);
    let starts = std::iter::once(0).chain(memchr::memmem::find_iter(bytes, b"\n---").map(|i| i + 1));
    for at in starts {
        let end = memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |e| at + e);
        let bare = text[at..end].trim_end_matches('\r');
        let is_separator = bare
            .strip_prefix("---")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(' ') || rest.starts_with('\t'));
        if !is_separator {
            continue;
        }
        line += memchr::memchr_iter(b'\n', &bytes[counted..at]).count();
        counted = at;
        let chunk = &text[start..at];
        if seen_separator || !is_blank(chunk) {
            docs.push((start_line, chunk));
        }
        seen_separator = true;
        // Content after `--- ` on the same line belongs to the next document.
        start = at + 3;
        start_line = line;
    }
    let chunk = &text[start..];
    if !is_blank(chunk) {
        docs.push((start_line, chunk));
    }
    docs
}

/// Only blank lines and comments.
fn is_blank(chunk: &str) -> bool {
    chunk.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
}

/// The parser's message with the line counted from the start of the file.
fn yaml_message(source: Source, first_line: usize, e: &serde_saphyr::Error) -> String {
    // Without the snippet: it could quote lines of the file, e.g. of a Secret.
    let message = e.without_snippet().to_string();
    match e.location() {
        Some(loc) => {
            let suffix = format!(" at line {}, column {}", loc.line(), loc.column());
            let message = message.strip_suffix(&suffix).unwrap_or(&message);
            let line = usize::try_from(loc.line()).unwrap_or(0).saturating_add(first_line).saturating_sub(1);
            format!("{source}: line {line}, column {}: {message}", loc.column())
        }
        None => format!("{source}: {message}"),
    }
}

fn object_error(file: &str, source: Source, path: &str, message: &str) -> StreamError {
    StreamError::Object {
        file: file.to_owned(),
        at: source,
        path: path.to_owned(),
        message: message.to_owned(),
    }
}

pub(crate) fn decode_into(
    file: &str,
    source: Source,
    doc: Value,
    warnings: &mut Vec<String>,
    emit: &mut impl FnMut(Source, Object),
) -> Result<(), StreamError> {
    if !doc.is_object() {
        return Err(object_error(
            file,
            source,
            ".",
            "a document must be a Kubernetes object (a mapping with apiVersion and kind)",
        ));
    }
    let field = |name: &str| doc.get(name).and_then(Value::as_str).map(str::to_owned);
    let Some(api_version) = field("apiVersion") else {
        return Err(object_error(file, source, "apiVersion", "missing apiVersion"));
    };
    let Some(kind) = field("kind") else {
        return Err(object_error(file, source, "kind", "missing kind"));
    };
    let Some(kind_tag) = Kind::of(&api_version, &kind) else {
        let name = doc.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
        warnings.push(format!(
            "{file}: {source}: ignoring {api_version} {kind} {name:?}: not a kind ferrolb reads"
        ));
        return Ok(());
    };
    let mut unknown = Vec::new();
    let object = decode(file, source, &doc, kind_tag, &mut unknown)?;
    if let Some(path) = unknown.first() {
        let name = object.name();
        if matches!(object, Object::Node(_) | Object::Service(_) | Object::EndpointSlice(_)) {
            // kubectl output from a newer Kubernetes may hold fields our types lack.
            warnings.push(format!(
                "{file}: {source}: {kind} {name:?}: ignoring unknown fields {}",
                unknown.join(", ")
            ));
        } else {
            // A misspelt ferrolb field would silently take its default: refuse, like
            // `kubectl apply --validate=strict`.
            return Err(StreamError::Object {
                file: file.to_owned(),
                at: source,
                path: path.clone(),
                message: format!("unknown field in {kind} {name:?}; check the spelling against the API"),
            });
        }
    }
    emit(source, object);
    Ok(())
}

/// Rewrites serde_ignored's `status.?.addresses.?.0.typo` as `status.addresses[0].typo`.
fn field_path(ignored: &str) -> String {
    let mut out = String::new();
    for seg in ignored.split('.').filter(|s| *s != "?") {
        if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{seg}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(seg);
        }
    }
    out
}

/// The kinds a stream may hold, by `apiVersion` and `kind`.
#[derive(Clone, Copy)]
enum Kind {
    IpAddressPool,
    BgpPeer,
    BgpAdvertisement,
    L2Advertisement,
    BfdProfile,
    ControlPlaneVip,
    ServiceAnnouncement,
    Node,
    Service,
    EndpointSlice,
}

impl Kind {
    fn of(api_version: &str, kind: &str) -> Option<Kind> {
        Some(match (api_version, kind) {
            (API_VERSION, "IPAddressPool") => Kind::IpAddressPool,
            (API_VERSION, "BGPPeer") => Kind::BgpPeer,
            (API_VERSION, "BGPAdvertisement") => Kind::BgpAdvertisement,
            (API_VERSION, "L2Advertisement") => Kind::L2Advertisement,
            (API_VERSION, "BFDProfile") => Kind::BfdProfile,
            (API_VERSION, "ControlPlaneVIP") => Kind::ControlPlaneVip,
            (API_VERSION, "ServiceAnnouncement") => Kind::ServiceAnnouncement,
            ("v1", "Node") => Kind::Node,
            ("v1", "Service") => Kind::Service,
            ("discovery.k8s.io/v1", "EndpointSlice") => Kind::EndpointSlice,
            _ => return None,
        })
    }

    /// The object of this kind that `de` holds.
    fn decode<'de, D: serde::Deserializer<'de>>(self, de: D) -> Result<Object, D::Error> {
        use serde::Deserialize;
        fn boxed<'de, T: Deserialize<'de>, D: serde::Deserializer<'de>>(de: D) -> Result<Box<T>, D::Error> {
            Box::<T>::deserialize(de)
        }
        Ok(match self {
            Kind::IpAddressPool => Object::IpAddressPool(boxed(de)?),
            Kind::BgpPeer => Object::BgpPeer(boxed(de)?),
            Kind::BgpAdvertisement => Object::BgpAdvertisement(boxed(de)?),
            Kind::L2Advertisement => Object::L2Advertisement(boxed(de)?),
            Kind::BfdProfile => Object::BfdProfile(boxed(de)?),
            Kind::ControlPlaneVip => Object::ControlPlaneVip(boxed(de)?),
            Kind::ServiceAnnouncement => Object::ServiceAnnouncement(boxed(de)?),
            Kind::Node => Object::Node(boxed(de)?),
            Kind::Service => Object::Service(boxed(de)?),
            Kind::EndpointSlice => Object::EndpointSlice(boxed(de)?),
        })
    }
}

/// Collects the paths of the fields serde_ignored reports, as users spell them.
fn collect_unknown(unknown: &mut Vec<String>) -> impl FnMut(serde_ignored::Path<'_>) + '_ {
    |path| {
        let path = field_path(&path.to_string());
        // Some types read apiVersion and kind through their own means and skip the fields.
        if path != "apiVersion" && path != "kind" {
            unknown.push(path);
        }
    }
}

/// Decodes one object, collecting the paths of fields the type does not have.
fn decode(
    file: &str,
    source: Source,
    doc: &Value,
    kind: Kind,
    unknown: &mut Vec<String>,
) -> Result<Object, StreamError> {
    // The happy path reads without tracking where it is; only a failure reads the
    // document again to name the field.
    let result = kind.decode(serde_ignored::Deserializer::new(doc, &mut collect_unknown(unknown)));
    result.or_else(|_| {
        let mut track = serde_path_to_error::Track::new();
        let de = serde_path_to_error::Deserializer::new(doc, &mut track);
        kind.decode(de).map_err(|e| StreamError::Object {
            file: file.to_owned(),
            at: source,
            path: track.path().to_string(),
            message: e.to_string(),
        })
    })
}

/// The object a document read by the fast reader holds, decoded straight from it, if it
/// is one object of a kind ferrolb reads that decodes without an error and without an
/// unknown field: the common case of a big file. Anything else (a List, an error, an
/// unknown field, a kind ferrolb ignores) is `None` and goes the general way, through a
/// `Value`, which decodes the same object and words every error and warning.
pub(crate) fn decode_fast(node: &crate::fast_yaml::Node<'_>) -> Option<Object> {
    let kind = Kind::of(node.str_field("apiVersion")?, node.str_field("kind")?)?;
    let mut unknown = Vec::new();
    let object =
        kind.decode(serde_ignored::Deserializer::new(node, &mut collect_unknown(&mut unknown))).ok()?;
    unknown.is_empty().then_some(object)
}

impl Config {
    /// The ferrolb configuration kinds among `objects`, in their order; other kinds are
    /// left out.
    pub fn from_objects<'a>(objects: impl IntoIterator<Item = &'a Object>) -> Config {
        let mut c = Config::default();
        for o in objects {
            match o {
                Object::IpAddressPool(x) => c.pools.push((**x).clone()),
                Object::BgpPeer(x) => c.peers.push((**x).clone()),
                Object::BgpAdvertisement(x) => c.bgp_advertisements.push((**x).clone()),
                Object::L2Advertisement(x) => c.l2_advertisements.push((**x).clone()),
                Object::BfdProfile(x) => c.bfd_profiles.push((**x).clone()),
                Object::ControlPlaneVip(x) => c.control_plane_vips.push((**x).clone()),
                Object::ServiceAnnouncement(_)
                | Object::Node(_)
                | Object::Service(_)
                | Object::EndpointSlice(_) => {}
            }
        }
        c
    }
}

impl ObjectStream {
    /// The ferrolb configuration objects of the stream, for [`Config::validate`].
    pub fn config(&self) -> Config {
        Config::from_objects(self.objects.iter().map(|(_, o)| o))
    }

    /// Validates [`Self::config`] as file content, naming the document of each object in errors.
    pub fn validated_config(&self, file: &str) -> Result<ValidConfig, StreamError> {
        self.config().validate(Origin::File).map_err(|errors| StreamError::Invalid {
            file: file.to_owned(),
            errors: errors
                .into_iter()
                .map(|e| {
                    let src = self
                        .objects
                        .iter()
                        .find(|(_, o)| o.kind() == e.kind && o.name() == e.name)
                        .map(|(s, _)| *s);
                    (src, e)
                })
                .collect(),
        })
    }
}

/// Writes objects as a `---`-separated stream that [`parse_stream`] reads back.
pub fn write_stream<'a>(objects: impl IntoIterator<Item = &'a Object>) -> Result<String, StreamError> {
    let mut out = String::new();
    for o in objects {
        let yaml = serde_saphyr::to_string(o).map_err(|e| StreamError::Serialize {
            kind: o.kind(),
            name: o.name(),
            message: e.to_string(),
        })?;
        out.push_str("---\n");
        out.push_str(&yaml);
        if !yaml.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// Replaces `path` with `bytes` so readers see the old or the new file, never a mix, even
/// across a crash: temp file in the same directory, fsync, rename, fsync the directory.
/// With `keep_previous`, the replaced content stays available as `FILE.prev`.
pub fn write_atomically(path: &Path, bytes: &[u8], keep_previous: bool) -> Result<(), StreamError> {
    let io_err = |source| StreamError::Io { file: path.display().to_string(), source };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = path
        .file_name()
        .ok_or_else(|| io_err(io::Error::new(io::ErrorKind::InvalidInput, "the path has no file name")))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    // pid + counter: two writers in one process must not share a temp file either.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tmp_name.push(format!(".tmp.{}.{n}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        if keep_previous && path.exists() {
            let mut prev_name = file_name.to_os_string();
            prev_name.push(".prev");
            let prev = dir.join(prev_name);
            match fs::remove_file(&prev) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            // A hard link keeps the old content without a moment where `path` is missing.
            if fs::hard_link(path, &prev).is_err() {
                fs::copy(path, &prev)?;
                fs::File::open(&prev)?.sync_all()?;
            }
        }
        fs::rename(&tmp, path)?;
        fs::File::open(&dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(io_err)
}
