//! Reading a stream: splitting a file into documents, parsing them (on every core for a
//! big file) and handing each object to the stream or to the caller's taker.

use std::fs;
use std::path::Path;

use serde_json::Value;

use super::decode::{decode_fast, decode_into, object_error};
use super::object::Object;
use super::{ObjectStream, Source, StreamError};
use crate::service_fields::ServiceFields;

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

/// The non-empty documents of a YAML stream as JSON values, any kind (Kubernetes
/// objects, kustomizations, rendered charts); the error names the document's first line.
pub fn json_documents(text: &str) -> Result<Vec<serde_json::Value>, String> {
    let mut out = Vec::new();
    for (line, doc) in split_documents(text) {
        let value: serde_json::Value =
            serde_saphyr::from_str(doc).map_err(|e| format!("the document at line {line}: {e}"))?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}
