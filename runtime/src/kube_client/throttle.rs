//! Client-side throttling, as client-go's `rest.Config.QPS` / `Burst`: a token bucket in
//! front of kube's HTTP stack, so that no binary, and no bug in one, sends the apiserver
//! more than `burst` requests at once or more than `qps` a second after that.
//!
//! A request waits for its token in [`Throttle::poll_ready`]. kube's `Client` puts the
//! stack behind one `tower::buffer::Buffer`, whose single worker asks for readiness once
//! per request in the order the requests came: so tokens go out first come, first served,
//! and a request its caller gave up on (a deadline) hands its token to the next one.
//! A watch's start takes one token like any other request and holds nothing after its
//! response headers: however long its stream then stays open, it delays no one.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// How many requests a client may send: `burst` at once, then `qps` a second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Requests a second, sustained (at least 1).
    pub qps: u32,
    /// Requests at once after a quiet spell (at least 1).
    pub burst: u32,
}

impl Limits {
    /// The speaker runs on every node, 5 000 of them in a big cluster. At rest it sends
    /// nothing but watches; what it sends grows with the Services it announces (a
    /// ServiceAnnouncement and an Event each, the readiness gates' patches), so its rate is
    /// kubelet's rather than kube-proxy's 5 a second: 1 000 Services created at once are
    /// written in 100 s at 20 a second, where at 5 the readiness gates of Cluster Services,
    /// which wait for those objects, would hold their pods for 7 minutes. The burst, 50,
    /// holds a start (a list and a watch for each of the nine watched kinds, the membership
    /// Secret, the ServiceAnnouncement list, a few list pages) and every peer's BGP password
    /// read at once. Its tasks send one request at a time, so few ever queue.
    pub const SPEAKER: Limits = Limits { qps: 20, burst: 50 };

    /// The controller is one leader for the whole cluster (standbys only read the Lease):
    /// kube-scheduler's limits. Its callers each send one request at a time (16 reconciles,
    /// a watcher per kind, the Lease), so a Lease renewal waits behind about 30 requests at
    /// most, 0.6 s at 50 a second, well inside its renew deadline (10 s by default).
    pub const CONTROLLER: Limits = Limits { qps: 50, burst: 100 };

    /// The bootstrap, on each control-plane node, sends its local apiserver a watch and,
    /// once a minute, a refresh's reads one at a time: client-go's defaults are ample, and
    /// keep a retry loop gone wrong from loading the apiserver it fronts.
    pub const BOOTSTRAP: Limits = Limits { qps: 5, burst: 10 };
}

/// Wraps a service in a [`Throttle`] with its own bucket: one budget per client.
#[derive(Clone, Copy, Debug)]
pub struct ThrottleLayer {
    limits: Limits,
}

impl ThrottleLayer {
    /// Throttles to `limits`.
    pub fn new(limits: Limits) -> Self {
        ThrottleLayer { limits }
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Throttle<S> {
        Throttle { inner, bucket: Bucket::new(self.limits, Instant::now()), permit: Permit::None }
    }
}

/// A service that lets a request through only with a token from its bucket. Not `Clone`:
/// clones would each need a share of one bucket and of one queue; behind kube's `Buffer`
/// one instance serves every clone of the `Client`.
pub struct Throttle<S> {
    inner: S,
    bucket: Bucket,
    permit: Permit,
}

/// Where the next request stands with its token.
enum Permit {
    /// Not taken yet.
    None,
    /// Taken, usable when the sleep ends.
    Waiting(Pin<Box<Sleep>>),
    /// Usable now.
    Held,
}

impl<S, R> Service<R> for Throttle<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        loop {
            match &mut self.permit {
                Permit::Held => return self.inner.poll_ready(cx),
                Permit::Waiting(sleep) => {
                    ready!(sleep.as_mut().poll(cx));
                    self.permit = Permit::Held;
                }
                Permit::None => {
                    let now = Instant::now();
                    let at = self.bucket.take(now);
                    self.permit = match at > now {
                        true => Permit::Waiting(Box::pin(tokio::time::sleep_until(at))),
                        false => Permit::Held,
                    };
                }
            }
        }
    }

    fn call(&mut self, request: R) -> S::Future {
        // tower's contract is to call only once `poll_ready` said ready; a caller that
        // breaks it still pays its token, though it is not held back.
        if let Permit::None = std::mem::replace(&mut self.permit, Permit::None) {
            self.bucket.take(Instant::now());
        }
        self.inner.call(request)
    }
}

/// A token bucket of `burst` tokens refilled at `qps`, kept as the instant it is full
/// again (GCRA's theoretical arrival time): no float, no refill loop.
#[derive(Debug)]
struct Bucket {
    /// How long one token takes to come back.
    interval: Duration,
    /// How long a whole bucket takes to come back.
    capacity: Duration,
    /// When every token taken so far is back.
    full_at: Instant,
}

impl Bucket {
    fn new(limits: Limits, now: Instant) -> Self {
        let interval = Duration::from_secs(1) / limits.qps.max(1);
        Bucket { interval, capacity: interval * limits.burst.max(1), full_at: now }
    }

    /// Takes a token; returns when it may be used: `now` while the bucket has one, else
    /// when the token's turn comes (tokens taken earlier come first).
    fn take(&mut self, now: Instant) -> Instant {
        self.full_at = self.full_at.max(now) + self.interval;
        // More than a whole bucket owed: the excess is the wait.
        now + self.full_at.saturating_duration_since(now).saturating_sub(self.capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use hyper::body::{Body as HttpBody, Frame};
    use hyper::{Request, Response};
    use kube::client::Body;

    const MS: Duration = Duration::from_millis(1);
    const SECOND: Duration = Duration::from_secs(1);

    /// The requests the stub apiserver received: path and query, and when.
    type Received = Arc<Mutex<Vec<(String, Duration)>>>;

    /// A kube client whose requests go through a [`Throttle`] to a stub apiserver that
    /// answers each at once; a watch's answer is a stream that stays open.
    fn client(limits: Limits) -> (kube::Client, Received) {
        let received = Received::default();
        let log = received.clone();
        let start = Instant::now();
        let stub = tower::service_fn(move |req: Request<Body>| {
            let uri = req.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
            let watch = uri.contains("watch=true");
            log.lock().unwrap().push((uri, start.elapsed()));
            async move { Ok::<_, Infallible>(Response::new(Stream { open: watch })) }
        });
        (kube::Client::new(ThrottleLayer::new(limits).layer(stub), "default"), received)
    }

    /// A response body: empty, or a watch's stream that never ends.
    struct Stream {
        open: bool,
    }

    impl HttpBody for Stream {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            match self.open {
                true => Poll::Pending,
                false => Poll::Ready(None),
            }
        }

        fn is_end_stream(&self) -> bool {
            !self.open
        }
    }

    fn get(path: &str) -> Request<Body> {
        Request::get(path).body(Body::empty()).unwrap()
    }

    /// Sends `paths` at once, in order, and waits for every answer.
    async fn send_all(client: &kube::Client, paths: &[String]) -> Vec<Response<Body>> {
        let tasks: Vec<_> = paths
            .iter()
            .map(|p| {
                let (client, request) = (client.clone(), get(p));
                tokio::spawn(async move { client.send(request).await })
            })
            .collect();
        let mut responses = Vec::new();
        for t in tasks {
            responses.push(t.await.unwrap().unwrap());
        }
        responses
    }

    fn pods(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("/api/v1/namespaces/default/pods/p{i}")).collect()
    }

    fn sent_by(received: &Received, t: Duration) -> usize {
        received.lock().unwrap().iter().filter(|(_, at)| *at <= t).count()
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_at_once_then_qps_a_second() {
        let (client, received) = client(Limits { qps: 5, burst: 20 });
        send_all(&client, &pods(100)).await;
        assert_eq!(sent_by(&received, Duration::ZERO), 20);
        assert_eq!(sent_by(&received, SECOND), 25);
        assert_eq!(sent_by(&received, 2 * SECOND), 30);
        // All of them, the last at (100 - 20) / 5 s: waiting, never failing.
        assert_eq!(received.lock().unwrap().len(), 100);
        assert_eq!(received.lock().unwrap().last().map(|r| r.1), Some(16 * SECOND));
    }

    #[tokio::test(start_paused = true)]
    async fn requests_leave_in_the_order_they_came_each_at_its_turn() {
        let (client, received) = client(Limits { qps: 10, burst: 3 });
        let paths = pods(10);
        send_all(&client, &paths).await;
        let turns: Vec<_> = (0..10u32).map(|i| 100 * MS * i.saturating_sub(2)).collect();
        let expected: Vec<_> = paths.into_iter().zip(turns).collect();
        assert_eq!(*received.lock().unwrap(), expected);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_takes_one_token_and_holds_none_while_it_streams() {
        let (client, received) = client(Limits { qps: 1, burst: 2 });
        let watch = "/api/v1/pods?watch=true&resourceVersion=1".to_string();
        let pods = pods(3);
        let paths = [pods[0].clone(), watch.clone(), pods[1].clone(), pods[2].clone()];
        let responses = send_all(&client, &paths).await;
        // The watch is still streaming while the later requests go, each at its turn.
        assert!(!responses[1].body().is_end_stream());
        let expected = vec![
            (pods[0].clone(), Duration::ZERO),
            (watch, Duration::ZERO),
            (pods[1].clone(), SECOND),
            (pods[2].clone(), 2 * SECOND),
        ];
        assert_eq!(*received.lock().unwrap(), expected);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_given_up_while_waiting_hands_its_turn_to_the_next() {
        let (client, received) = client(Limits { qps: 1, burst: 1 });
        let pods = pods(3);
        send_all(&client, &pods[..1]).await;
        // The second waits for its token at 1 s; its caller gives up at 0.5 s.
        let given_up = tokio::time::timeout(SECOND / 2, client.send(get(&pods[1])));
        let (abandoned, _) = tokio::join!(given_up, send_all(&client, &pods[2..]));
        assert!(abandoned.is_err());
        let expected = vec![(pods[0].clone(), Duration::ZERO), (pods[2].clone(), SECOND)];
        assert_eq!(*received.lock().unwrap(), expected);
    }

    #[test]
    fn an_idle_bucket_refills_to_burst_and_no_further() {
        let start = Instant::now();
        let mut bucket = Bucket::new(Limits { qps: 10, burst: 3 }, start);
        let takes = |bucket: &mut Bucket, at: Instant| -> Vec<Duration> {
            (0..5).map(|_| bucket.take(at) - at).collect()
        };
        let waits = [Duration::ZERO, Duration::ZERO, Duration::ZERO, 100 * MS, 200 * MS];
        assert_eq!(takes(&mut bucket, start), waits);
        // An hour idle buys three tokens, not 36 000.
        assert_eq!(takes(&mut bucket, start + 3600 * SECOND), waits);
        // 0.3 s on, one token is back; the next is 0.1 s away.
        let later = start + 3600 * SECOND + 300 * MS;
        assert_eq!(bucket.take(later) - later, Duration::ZERO);
        assert_eq!(bucket.take(later) - later, 100 * MS);
    }
}
