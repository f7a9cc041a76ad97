//! What a client receives from the apiserver, counted as it arrives: the bytes of every
//! response body and the events of every watch, by verb and resource
//! (`ferrolb_kube_client_received_bytes_total`, `ferrolb_kube_client_watch_events_total`).
//!
//! The apiserver's own metrics count watch events per resource for every watcher
//! together, and its audit log records a watch once, when it starts: neither says what
//! one component's watches cost it. At 5 000 nodes that is the figure that matters (every
//! speaker receives every change of what it watches), so each client counts its own.
//! A watch sends one JSON object per line, `{"type":"ADDED","object":…}`: each line is
//! counted by its type as it begins (the apiserver writes the type first; the
//! conformance body `watch_lines_begin_with_their_type` holds the real one and the fake
//! to it, and a line that does not count as `other`), so bookmarks (which carry no
//! change) are told from the events that do. Bytes are the body as the apiserver sent
//! it (gzipped when large: the counter sits under the decompression, see
//! [`super::compression`]; watches are never compressed), without the HTTP and TLS
//! framing.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper::{Method, Request, Response};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tower::{Layer, Service};

/// `verb` and `resource`, as the audit log names them (`list`, `watch`, `get`, `create`,
/// `update`, `patch`, `delete`; `services`, `services/status`, `endpointslices`, …).
type Labels = [(&'static str, String); 2];

/// The same and the event's `type` (`ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK`, `ERROR`,
/// or `other`).
type EventLabels = [(&'static str, String); 3];

/// Watch event types, as the apiserver spells them; anything else counts as the last.
const TYPES: [&str; 6] = ["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", "other"];

/// A client's counters. Clones share them.
#[derive(Clone, Debug, Default)]
pub struct Received {
    bytes: Family<Labels, Counter>,
    events: Family<EventLabels, Counter>,
}

impl Received {
    /// Registers the counters in `registry`, which must carry no prefix.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "ferrolb_kube_client_received_bytes",
            "Response body bytes this process received from the apiserver, by verb and resource",
            self.bytes.clone(),
        );
        registry.register(
            "ferrolb_kube_client_watch_events",
            "Watch events this process received from the apiserver, by resource and type (BOOKMARK: no change)",
            self.events.clone(),
        );
    }

    /// The bytes received for `verb` on `resource` so far.
    pub fn bytes(&self, verb: &'static str, resource: &str) -> u64 {
        self.bytes.get(&labels(verb, resource)).map_or(0, |c| c.get())
    }

    /// The watch events of type `kind` (one of [`TYPES`]) received on `resource` so far.
    pub fn events(&self, resource: &str, kind: &str) -> u64 {
        self.events.get(&event_labels(resource, kind)).map_or(0, |c| c.get())
    }
}

fn labels(verb: &'static str, resource: &str) -> Labels {
    [("verb", verb.to_owned()), ("resource", resource.to_owned())]
}

fn event_labels(resource: &str, kind: &str) -> EventLabels {
    [("verb", "watch".to_owned()), ("resource", resource.to_owned()), ("type", kind.to_owned())]
}

/// Counts what the service it wraps receives into a [`Received`].
#[derive(Clone, Debug)]
pub struct ReceivedLayer {
    received: Received,
}

impl ReceivedLayer {
    /// Counts into `received`.
    pub fn new(received: &Received) -> Self {
        ReceivedLayer { received: received.clone() }
    }
}

impl<S> Layer<S> for ReceivedLayer {
    type Service = Counting<S>;

    fn layer(&self, inner: S) -> Counting<S> {
        Counting { inner, received: self.received.clone() }
    }
}

/// A service whose response bodies are counted as they are read.
#[derive(Clone, Debug)]
pub struct Counting<S> {
    inner: S,
    received: Received,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Counting<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Response = Response<Counted<ResBody>>;
    type Error = S::Error;
    type Future = Answer<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (verb, resource) = verb_and_resource(request.method(), request.uri());
        let labels = labels(verb, &resource);
        let bytes = self.received.bytes.get_or_create(&labels).clone();
        let events = (verb == "watch").then(|| Lines::new(&self.received.events, &resource));
        Answer { inner: Box::pin(self.inner.call(request)), counters: Some((bytes, events)) }
    }
}

/// The response to come, its body then counted.
pub struct Answer<F> {
    inner: Pin<Box<F>>,
    counters: Option<(Counter, Option<Lines>)>,
}

impl<F, B, E> Future for Answer<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<Counted<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let response = ready!(self.inner.as_mut().poll(cx))?;
        let (bytes, events) = self.counters.take().unwrap_or_default();
        Poll::Ready(Ok(response.map(|body| Counted { inner: Box::pin(body), bytes, events })))
    }
}

/// A response body that counts its bytes, and its events when it is a watch's.
pub struct Counted<B> {
    inner: Pin<Box<B>>,
    bytes: Counter,
    events: Option<Lines>,
}

/// A watch's lines, each counted by its event type once its start has arrived (a line
/// may begin in one chunk and go on in the next).
#[derive(Debug, Default)]
pub struct Lines {
    /// One counter per [`TYPES`].
    by_type: [Counter; 6],
    /// The current line's first bytes, up to [`HEAD`].
    head: [u8; HEAD],
    len: usize,
    /// The current line is counted.
    counted: bool,
}

/// Every line begins `{"type":"`, then the type (8 bytes at most) and its quote.
const PREFIX: &[u8] = b"{\"type\":\"";
const HEAD: usize = PREFIX.len() + 9;

impl Lines {
    fn new(family: &Family<EventLabels, Counter>, resource: &str) -> Self {
        let by_type = TYPES.map(|t| family.get_or_create(&event_labels(resource, t)).clone());
        Lines { by_type, ..Lines::default() }
    }

    /// Reads one chunk of the body.
    fn feed(&mut self, mut data: &[u8]) {
        loop {
            let end = data.iter().position(|&b| b == b'\n');
            let part = &data[..end.unwrap_or(data.len())];
            if !self.counted {
                let take = part.len().min(HEAD - self.len);
                self.head[self.len..self.len + take].copy_from_slice(&part[..take]);
                self.len += take;
                if self.len == HEAD {
                    self.count();
                }
            }
            let Some(end) = end else { return };
            if !self.counted && self.len > 0 {
                self.count();
            }
            (self.len, self.counted) = (0, false);
            data = &data[end + 1..];
        }
    }

    fn count(&mut self) {
        let head = &self.head[..self.len];
        let kind = head.strip_prefix(PREFIX).and_then(|rest| rest.split(|&b| b == b'"').next());
        let i = TYPES.iter().position(|t| kind == Some(t.as_bytes())).unwrap_or(TYPES.len() - 1);
        self.by_type[i].inc();
        self.counted = true;
    }
}

impl<B> Body for Counted<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let frame = ready!(self.inner.as_mut().poll_frame(cx));
        if let Some(data) = frame.as_ref().and_then(|f| f.as_ref().ok()).and_then(Frame::data_ref) {
            self.bytes.inc_by(data.len() as u64);
            if let Some(lines) = &mut self.events {
                lines.feed(data);
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The audit log's verb and resource of a request to `uri`: a GET is a `watch` when
/// it asks for one, a `get` when it names an object, a `list` otherwise. Paths that name
/// no resource (`/version`, discovery) are `other`.
fn verb_and_resource(method: &Method, uri: &hyper::Uri) -> (&'static str, String) {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    // After /api/v1 or /apis/GROUP/VERSION; then namespaces/NS when a resource follows.
    let rest = match segments.as_slice() {
        ["api", _, rest @ ..] => rest,
        ["apis", _, _, rest @ ..] => rest,
        _ => &[][..],
    };
    let rest = match rest {
        ["namespaces", _, resource, more @ ..] => [&[*resource][..], more].concat(),
        _ => rest.to_vec(),
    };
    let (resource, named) = match rest.as_slice() {
        [] => ("other".to_owned(), false),
        [resource] => ((*resource).to_owned(), false),
        [resource, _] => ((*resource).to_owned(), true),
        [resource, _, sub, ..] => (format!("{resource}/{sub}"), true),
    };
    let watch = uri.query().is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let verb = match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    };
    (verb, resource)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    use std::collections::VecDeque;

    use http_body_util::{BodyExt, Full};
    use kube::client::Body as KubeBody;

    fn verb(method: Method, uri: &str) -> (&'static str, String) {
        verb_and_resource(&method, &uri.parse().unwrap())
    }

    #[test]
    fn verbs_and_resources_are_the_audit_logs() {
        let cases = [
            (Method::GET, "/api/v1/services?watch=true&resourceVersion=5", "watch", "services"),
            (Method::GET, "/api/v1/services?limit=500", "list", "services"),
            (Method::GET, "/apis/discovery.k8s.io/v1/endpointslices?watch=1", "watch", "endpointslices"),
            (Method::GET, "/api/v1/namespaces/ferrolb-system/secrets/ferrolb-membership", "get", "secrets"),
            (
                Method::GET,
                "/api/v1/namespaces/ferrolb-system/secrets?fieldSelector=metadata.name%3Dbgp-auth&watch=true",
                "watch",
                "secrets",
            ),
            (Method::PATCH, "/api/v1/namespaces/web/services/a/status", "patch", "services/status"),
            (Method::PATCH, "/api/v1/namespaces/web/pods/p/status", "patch", "pods/status"),
            (Method::PUT, "/apis/coordination.k8s.io/v1/namespaces/x/leases/l", "update", "leases"),
            (Method::POST, "/apis/events.k8s.io/v1/namespaces/web/events", "create", "events"),
            (
                Method::DELETE,
                "/apis/ferrolb.io/v1beta1/serviceannouncements/a",
                "delete",
                "serviceannouncements",
            ),
            (Method::GET, "/api/v1/nodes/n1", "get", "nodes"),
            (Method::GET, "/api/v1/namespaces", "list", "namespaces"),
            (Method::GET, "/version", "list", "other"),
        ];
        for (method, uri, want_verb, want_resource) in cases {
            assert_eq!(verb(method, uri), (want_verb, want_resource.to_owned()), "{uri}");
        }
    }

    /// A watch's body, in chunks that split events anywhere, counted event by event.
    #[tokio::test]
    async fn a_watch_counts_each_event_and_every_byte_however_it_is_chunked() {
        let events = [
            "{\"type\":\"ADDED\",\"object\":{}}\n",
            "{\"type\":\"MODIFIED\",\"object\":{}}\n",
            "{\"type\":\"BOOKMARK\",\"object\":{}}\n",
            "{\"type\":\"MODIFIED\",\"object\":{}}\n",
        ];
        let whole = events.concat();
        // Split right after the first event, inside the second's type, and inside the
        // fourth's first bytes.
        let second = events[0].len();
        let fourth = second + events[1].len() + events[2].len();
        let chunks: Vec<Bytes> = [
            &whole[..second],
            &whole[second..second + 12],
            &whole[second + 12..fourth + 3],
            &whole[fourth + 3..],
        ]
        .into_iter()
        .map(|c| Bytes::copy_from_slice(c.as_bytes()))
        .collect();
        let received = Received::default();
        let stub = tower::service_fn(move |req: Request<KubeBody>| {
            let watch = req.uri().query().is_some_and(|q| q.contains("watch"));
            let frames: VecDeque<Bytes> = match watch {
                true => chunks.iter().cloned().collect(),
                false => [Bytes::from_static(b"{\"items\":[]}\n")].into(),
            };
            async move { Ok::<_, Infallible>(Response::new(Chunks(frames))) }
        });
        let client = kube::Client::new(ReceivedLayer::new(&received).layer(stub), "default");
        for uri in ["/api/v1/services?watch=true", "/api/v1/services"] {
            let response = client.send(Request::get(uri).body(KubeBody::empty()).unwrap()).await.unwrap();
            response.into_body().collect().await.unwrap();
        }
        let count = |t| received.events("services", t);
        assert_eq!([count("ADDED"), count("MODIFIED"), count("BOOKMARK"), count("other")], [1, 2, 1, 0]);
        assert_eq!(received.bytes("watch", "services"), whole.len() as u64);
        // A list's newline is no event.
        assert_eq!(received.bytes("list", "services"), 13);
        let mut registry = Registry::default();
        received.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "ferrolb_kube_client_watch_events_total{verb=\"watch\",resource=\"services\",type=\"MODIFIED\"} 2",
            "ferrolb_kube_client_received_bytes_total{verb=\"list\",resource=\"services\"} 13",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }

    /// An object's body, counted whole, no events.
    #[tokio::test]
    async fn a_write_counts_its_answer_and_no_event() {
        let received = Received::default();
        let stub = tower::service_fn(|_: Request<KubeBody>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"{\"kind\":\"Service\"}"))))
        });
        let client = kube::Client::new(ReceivedLayer::new(&received).layer(stub), "default");
        let request =
            Request::patch("/api/v1/namespaces/a/services/b/status").body(KubeBody::empty()).unwrap();
        client.send(request).await.unwrap().into_body().collect().await.unwrap();
        assert_eq!(received.bytes("patch", "services/status"), 18);
        assert!(TYPES.iter().all(|t| received.events("services/status", t) == 0));
    }

    /// A body sent in the chunks given.
    struct Chunks(VecDeque<Bytes>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Ready(self.0.pop_front().map(|c| Ok(Frame::data(c))))
        }
    }
}
