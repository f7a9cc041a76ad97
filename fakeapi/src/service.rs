//! The tower `Service` behind `kube::Client`: routes REST requests to the store.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{Method, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::fields::{self, Scope, Writer};
use crate::patch;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Managed, Propagation, Store, Target, now};
use crate::watch::{self, WatchRequest};
use crate::{Inner, Verb};

/// Response body: a whole JSON document, or a watch stream.
pub type ResponseBody = UnsyncBoxBody<Bytes, Infallible>;

/// The in-process apiserver as a tower `Service`; cheap to clone.
#[derive(Clone)]
pub struct FakeService {
    pub(crate) inner: Arc<Inner>,
    /// The client's tag ([`crate::FakeApiServer::new_client_tagged`]).
    pub(crate) client: Option<Arc<str>>,
}

impl tower::Service<Request<kube::client::Body>> for FakeService {
    type Response = Response<ResponseBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
        let inner = self.inner.clone();
        let client = self.client.clone();
        Box::pin(async move {
            inner.count(None);
            let path = req.uri().path();
            let kind =
                route(path).and_then(|r| verb(req.method(), &r, &Query::parse(req.uri().query())).ok());
            let entry = inner.log_sent(client.as_deref(), kind, path, req.uri().query().unwrap_or_default());
            let on_the_wire = inner.delays(client.as_deref());
            let serve = async move {
                // An outage that hangs: requests wait until it ends (or the client gives up).
                inner.wait_while_hanging(client.as_deref()).await;
                let response = handle(&inner, req).await.unwrap_or_else(|e| error_response(&e));
                inner.log_answered(entry, response.status().as_u16());
                response
            };
            if !on_the_wire {
                return Ok(serve.await);
            }
            // A delayed link: the request is already on its way, so it is served when the
            // link is back whether or not the client still waits for the answer.
            Ok(tokio::spawn(serve).await.unwrap_or_else(|_| error_response(&ApiError::Unavailable)))
        })
    }
}

fn json_response(code: StatusCode, v: &Value) -> Response<ResponseBody> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())).boxed_unsync());
    *r.status_mut() = code;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    r
}

fn error_response(e: &ApiError) -> Response<ResponseBody> {
    json_response(StatusCode::from_u16(e.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), &e.to_status())
}

/// Decodes `application/x-www-form-urlencoded` query text.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct Query(Vec<(String, String)>);

impl Query {
    fn parse(q: Option<&str>) -> Self {
        Query(
            q.unwrap_or_default()
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (decode(k), decode(v))
                })
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }
}

/// A REST path, split into its parts.
#[derive(Debug, PartialEq)]
struct Route {
    group: String,
    version: String,
    plural: String,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

fn route(path: &str) -> Option<Route> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let (plural, namespace, tail) = match rest {
        ["namespaces"] => ("namespaces", None, &rest[1..]),
        ["namespaces", _] | ["namespaces", _, "status" | "finalize"] => ("namespaces", None, &rest[1..]),
        ["namespaces", ns, plural, tail @ ..] => (*plural, Some(ns.to_string()), tail),
        [plural, tail @ ..] => (*plural, None, tail),
        [] => return None,
    };
    if tail.len() > 2 {
        return None;
    }
    Some(Route {
        group: group.into(),
        version: version.into(),
        plural: plural.into(),
        namespace,
        name: tail.first().map(|s| s.to_string()),
        subresource: tail.get(1).map(|s| s.to_string()),
    })
}

fn verb(method: &Method, r: &Route, q: &Query) -> Result<Verb, ApiError> {
    Ok(match (method, r.name.is_some()) {
        (&Method::GET, true) => Verb::Get,
        (&Method::GET, false) if q.flag("watch") => Verb::Watch,
        (&Method::GET, false) => Verb::List,
        (&Method::POST, false) => Verb::Create,
        (&Method::PUT, true) => Verb::Update,
        (&Method::PATCH, true) => Verb::Patch,
        (&Method::DELETE, true) => Verb::Delete,
        (&Method::DELETE, false) => Verb::DeleteCollection,
        _ => return Err(ApiError::MethodNotAllowed),
    })
}

async fn handle(inner: &Inner, req: Request<kube::client::Body>) -> Result<Response<ResponseBody>, ApiError> {
    if inner.unavailable.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(ApiError::Unavailable);
    }
    let (parts, body) = req.into_parts();
    if parts.uri.path() == "/version" {
        return Ok(json_response(
            StatusCode::OK,
            &json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-ferrolb-fakeapi", "platform": "linux/amd64"}),
        ));
    }
    let r = route(parts.uri.path())
        .ok_or_else(|| ApiError::NotFound { kind: "path".into(), name: parts.uri.path().into() })?;
    let q = Query::parse(parts.uri.query());
    let verb = verb(&parts.method, &r, &q)?;
    inner.count(Some(verb));
    let body =
        body.collect().await.map_err(|e| ApiError::BadRequest(format!("reading body: {e}")))?.to_bytes();
    let content_type =
        parts.headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    // The real server names an unnamed manager after the user agent's product token.
    let manager = q
        .get("fieldManager")
        .map(String::from)
        .or_else(|| {
            let ua = parts.headers.get(http::header::USER_AGENT)?.to_str().ok()?;
            ua.split('/').next().map(String::from)
        })
        .unwrap_or_else(|| "unknown".into());
    let scope_of = |t: &Target| match r.subresource.as_deref() {
        Some("status") => Ok(Scope::Status),
        None => Ok(Scope::Main { status_subresource: t.info.status_subresource }),
        Some(other) => {
            Err(ApiError::NotFound { kind: format!("{}/{other}", t.info.plural), name: String::new() })
        }
    };
    let parse_body = || -> Result<Value, ApiError> {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::BadRequest(format!("request body is not JSON: {e}")))
    };
    let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or_default())?;
    let fields_sel = FieldSelector::parse(q.get("fieldSelector").unwrap_or_default())?;
    let name = r.name.clone().unwrap_or_default();

    let mut guard = inner.lock();
    // dryRun=All runs the whole write path on a copy that is then dropped.
    let mut dry_copy;
    let store: &mut Store = if q.get("dryRun") == Some("All") {
        dry_copy = guard.dry_run_copy();
        &mut dry_copy
    } else {
        &mut guard
    };
    let t = store.target(&r.group, &r.version, &r.plural, r.namespace.clone())?;
    if t.info.status_subresource || r.subresource.is_none() {
        scope_of(&t)?;
    } else {
        return Err(ApiError::NotFound { kind: t.info.plural.clone(), name });
    }
    match verb {
        Verb::Get => Ok(json_response(StatusCode::OK, &store.get(&t, &name)?)),
        Verb::List => {
            let now = store.rv;
            let limit = q.get("limit").and_then(|l| l.parse::<usize>().ok()).filter(|l| *l > 0);
            // Every page of one list reports the first page's resourceVersion, as a real
            // apiserver does (its pages are one snapshot): a client that watches from it
            // then sees every change made while it paged, even to items on earlier pages.
            let rv = q.get("continue").and_then(token_rv).unwrap_or(now);
            let items = store.matching(&t, &labels, &fields_sel);
            let (page, next, remaining) = paginate(items, q.get("continue"), limit, |o| Store::show(&t, o));
            let next = next.map(|key| format!("{rv}:{key}"));
            let mut metadata = json!({"resourceVersion": rv.to_string()});
            if let (Some(next), Some(m)) = (next, metadata.as_object_mut()) {
                m.insert("continue".into(), json!(next));
                m.insert("remainingItemCount".into(), json!(remaining));
            }
            Ok(json_response(
                StatusCode::OK,
                &json!({
                    "kind": format!("{}List", t.info.kind),
                    "apiVersion": t.info.api_version(&t.version),
                    "metadata": metadata,
                    "items": page,
                }),
            ))
        }
        Verb::Watch => {
            let req = WatchRequest {
                target: t,
                labels,
                fields: fields_sel,
                resource_version: q.get("resourceVersion").map(String::from),
                bookmarks: q.flag("allowWatchBookmarks"),
                send_initial_events: q.flag("sendInitialEvents"),
                timeout: q.get("timeoutSeconds").and_then(|s| s.parse().ok()).map(Duration::from_secs),
                bookmark_interval: inner.bookmark_interval(),
            };
            let stream = watch::open(store, req)?;
            drop(guard);
            let body = StreamBody::new(stream.map(|b| Ok::<_, Infallible>(Frame::data(b))));
            let mut resp = Response::new(body.boxed_unsync());
            resp.headers_mut()
                .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
            Ok(resp)
        }
        Verb::Create => {
            let created = store.create(&t, parse_body()?, &manager, Managed::Update)?;
            Ok(json_response(StatusCode::CREATED, &created))
        }
        Verb::Update => {
            let scope = scope_of(&t)?;
            Ok(json_response(
                StatusCode::OK,
                &store.update(&t, &name, parse_body()?, scope, &manager, Managed::Update)?,
            ))
        }
        Verb::Patch => {
            let scope = scope_of(&t)?;
            let patch = parse_body()?;
            match content_type.split(';').next().unwrap_or_default().trim() {
                // Strategic merge patch is served as a JSON merge patch: lists are replaced, not merged by key.
                "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                    let mut candidate = store.get(&t, &name)?;
                    patch::merge_patch(&mut candidate, &patch);
                    Ok(json_response(StatusCode::OK, &store.update(&t, &name, candidate, scope, &manager, Managed::Update)?))
                }
                // kube-runtime's finalizer() helper uses JSON patch with `test` operations.
                "application/json-patch+json" => {
                    let mut candidate = store.get(&t, &name)?;
                    patch::json_patch(&mut candidate, &patch)?;
                    Ok(json_response(StatusCode::OK, &store.update(&t, &name, candidate, scope, &manager, Managed::Update)?))
                }
                "application/apply-patch+yaml" => apply(store, &t, &name, &patch, scope, &q),
                _ => Err(ApiError::UnsupportedMediaType(
                    "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
                        .into(),
                )),
            }
        }
        Verb::Delete => {
            let opts: Value = if body.is_empty() { json!({}) } else { parse_body()? };
            let policy =
                q.get("propagationPolicy").or_else(|| opts.get("propagationPolicy").and_then(Value::as_str));
            let propagation =
                if policy == Some("Orphan") { Propagation::Orphan } else { Propagation::Cascade };
            let rv = opts.pointer("/preconditions/resourceVersion").and_then(Value::as_str);
            let uid = opts.pointer("/preconditions/uid").and_then(Value::as_str);
            Ok(json_response(StatusCode::OK, &store.delete(&t, &name, propagation, rv, uid)?))
        }
        Verb::DeleteCollection => {
            let (items, _) = store.list(&t, &labels, &fields_sel);
            let mut deleted = Vec::new();
            for item in items {
                let item_ns = item.pointer("/metadata/namespace").and_then(Value::as_str).map(String::from);
                let item_name =
                    item.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
                let it = Target { namespace: item_ns, ..t.clone() };
                deleted.push(store.delete(&it, &item_name, Propagation::Cascade, None, None)?);
            }
            Ok(json_response(
                StatusCode::OK,
                &json!({
                    "kind": format!("{}List", t.info.kind),
                    "apiVersion": t.info.api_version(&t.version),
                    "metadata": {"resourceVersion": store.rv.to_string()},
                    "items": deleted,
                }),
            ))
        }
    }
}

/// The `namespace/name` key a continue token carries: the last item of the previous page.
fn list_key((ns, name): &(String, String)) -> String {
    format!("{ns}/{name}")
}

/// The resourceVersion of the first page, carried by a continue token `rv:namespace/name`.
fn token_rv(token: &str) -> Option<u64> {
    token.split_once(':').and_then(|(rv, _)| rv.parse().ok())
}

/// One page of a list: items after the continue token, at most `limit` (shown with
/// `show`), the next token and how many items remain. Pages show the current state, not
/// a snapshot at the first page's resourceVersion.
fn paginate<'a>(
    items: impl Iterator<Item = (&'a (String, String), &'a Value)>,
    token: Option<&str>,
    limit: Option<usize>,
    show: impl Fn(&Value) -> Value,
) -> (Vec<Value>, Option<String>, usize) {
    let after = token.filter(|t| !t.is_empty()).map(|t| t.split_once(':').map_or(t, |(_, k)| k));
    // Compare as (namespace, name) tuples, the store's order; names and namespaces hold no '/'.
    let after = after.map(|a| a.split_once('/').unwrap_or(("", a)));
    let mut rest = items
        .skip_while(|((ns, name), _)| after.is_some_and(|a| (ns.as_str(), name.as_str()) <= a))
        .peekable();
    let mut page = Vec::new();
    let mut last = None;
    while let Some((key, o)) = rest.next_if(|_| limit.is_none_or(|l| page.len() < l)) {
        page.push(show(o));
        last = Some(key);
    }
    match rest.count() {
        0 => (page, None, 0),
        remaining => (page, last.map(list_key), remaining),
    }
}

/// Server-side apply: create-or-update with field ownership.
fn apply(
    store: &mut Store,
    t: &Target,
    name: &str,
    patch: &Value,
    scope: Scope,
    q: &Query,
) -> Result<Response<ResponseBody>, ApiError> {
    let manager = q.get("fieldManager").filter(|m| !m.is_empty()).ok_or_else(|| {
        ApiError::BadRequest("PATCH requests with apply-patch+yaml must specify fieldManager".into())
    })?;
    if patch.get("apiVersion").and_then(Value::as_str).is_none()
        || patch.get("kind").and_then(Value::as_str).is_none()
    {
        return Err(ApiError::BadRequest(
            "apiVersion and kind must be set in an applied configuration".into(),
        ));
    }
    let writer = Writer {
        manager: manager.to_string(),
        api_version: t.info.api_version(&t.version),
        now: now(),
        scope,
    };
    let force = q.flag("force");
    match store.get(t, name) {
        Ok(old) => {
            let merged = fields::apply(Some(&old), patch, force, &writer)?;
            Ok(json_response(
                StatusCode::OK,
                &store.update(t, name, merged, scope, manager, Managed::Applied)?,
            ))
        }
        Err(ApiError::NotFound { .. }) if scope != Scope::Status => {
            let mut merged = fields::apply(None, patch, force, &writer)?;
            if let Some(m) = merged.get_mut("metadata").and_then(Value::as_object_mut) {
                m.insert("name".into(), json!(name));
            }
            Ok(json_response(StatusCode::CREATED, &store.create(t, merged, manager, Managed::Applied)?))
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn routes_like_the_real_apiserver() {
        let r = route("/api/v1/namespaces/default/services/web/status").unwrap();
        assert_eq!(
            (r.plural.as_str(), r.namespace.as_deref(), r.name.as_deref(), r.subresource.as_deref()),
            ("services", Some("default"), Some("web"), Some("status"))
        );
        let r = route("/api/v1/namespaces/default").unwrap();
        assert_eq!(
            (r.plural.as_str(), r.namespace, r.name.as_deref()),
            ("namespaces", None, Some("default"))
        );
        let r = route("/apis/coordination.k8s.io/v1/namespaces/x/leases").unwrap();
        assert_eq!((r.group.as_str(), r.plural.as_str(), r.name), ("coordination.k8s.io", "leases", None));
        let r = route("/apis/ferrolb.io/v1alpha1/addresspools/p").unwrap();
        assert_eq!((r.plural.as_str(), r.namespace, r.name.as_deref()), ("addresspools", None, Some("p")));
        assert!(route("/healthz").is_none());
    }

    #[test]
    fn pages_follow_continue_tokens() {
        // Store order: "a" sorts before "a-b" as a namespace, though "a/" > "a-" as text.
        let items: BTreeMap<(String, String), Value> = [("a", "b"), ("a", "c"), ("a-b", "a")]
            .iter()
            .map(|(ns, n)| {
                (((*ns).to_owned(), (*n).to_owned()), json!({"metadata": {"namespace": ns, "name": n}}))
            })
            .collect();
        let (p1, t1, left) = paginate(items.iter(), None, Some(2), Value::clone);
        assert_eq!((p1.len(), t1.as_deref(), left), (2, Some("a/c"), 1));
        let (p2, t2, _) =
            paginate(items.iter(), t1.map(|t| format!("7:{t}")).as_deref(), Some(2), Value::clone);
        assert_eq!((p2.len(), p2[0]["metadata"]["namespace"].as_str(), t2), (1, Some("a-b"), None));
        let (all, t, left) = paginate(items.iter(), None, None, Value::clone);
        assert_eq!((all.len(), t, left), (3, None, 0));
    }

    #[test]
    fn query_decoding() {
        let q = Query::parse(Some("labelSelector=app%3Dweb%2Ctier+in+%28a%29&watch=true"));
        assert_eq!(q.get("labelSelector"), Some("app=web,tier in (a)"));
        assert!(q.flag("watch"));
    }
}
