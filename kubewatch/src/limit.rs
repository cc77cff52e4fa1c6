//! client-go's client-side rate limit of the API server's clients
//! (`--kubernetesApiQPS`, `--kubernetesApiBurst`: istiod's 80 and 160): a
//! token bucket of `burst` tokens refilled at `qps` a second, one token a
//! request; a request without one waits for it. A layer of the kube
//! client's stack ([`limited`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// The bucket.
#[derive(Debug)]
pub struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// Full, at `now`. A `qps` of zero or less: no limit.
    pub fn new(qps: f64, burst: u32, now: Instant) -> Bucket {
        let burst = f64::from(burst.max(1));
        Bucket { qps, burst, tokens: burst, at: now }
    }

    /// Takes a token at `now`, or says how long until one is there.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        if self.qps <= 0.0 {
            return Ok(());
        }
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.at = self.at.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
        }
    }
}

/// The runtime's clock (a paused one in tests).
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The layer: every service it wraps shares one bucket.
#[derive(Debug, Clone)]
pub struct Limit(Arc<Mutex<Bucket>>);

impl Limit {
    /// `qps` requests a second, bursts of `burst`.
    pub fn new(qps: f64, burst: u32) -> Limit {
        Limit(Arc::new(Mutex::new(Bucket::new(qps, burst, now()))))
    }
}

impl<S> tower::Layer<S> for Limit {
    type Service = Limited<S>;
    fn layer(&self, inner: S) -> Limited<S> {
        Limited { inner, bucket: self.0.clone(), wait: None, holds: false }
    }
}

/// A service behind the bucket: ready once it holds a token.
pub struct Limited<S> {
    inner: S,
    bucket: Arc<Mutex<Bucket>>,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
    holds: bool,
}

impl<S: std::fmt::Debug> std::fmt::Debug for Limited<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limited").field("inner", &self.inner).field("holds", &self.holds).finish()
    }
}

impl<S: tower::Service<R>, R> tower::Service<R> for Limited<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        while !self.holds {
            if let Some(w) = self.wait.as_mut() {
                if w.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.wait = None;
            }
            let taken = self.bucket.lock().unwrap_or_else(|e| e.into_inner()).take(now());
            match taken {
                Ok(()) => self.holds = true,
                Err(wait) => self.wait = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> S::Future {
        self.holds = false;
        self.inner.call(req)
    }
}

/// The process's limit for each API server client (`--kubernetesApiQPS`,
/// `--kubernetesApiBurst`), set once at start; unset: no limit.
static DEFAULT: std::sync::OnceLock<(f64, u32)> = std::sync::OnceLock::new();

/// Sets [`client`]'s limit (the first call wins).
pub fn set_default(qps: f64, burst: u32) {
    let _ = DEFAULT.set((qps, burst));
}

/// A kube client of `config` with a bucket of its own, as client-go gives
/// each cluster's client one.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    let (qps, burst) = DEFAULT.get().copied().unwrap_or((0.0, 1));
    Ok(kube::client::ClientBuilder::try_from(config)?.with_layer(&Limit::new(qps, burst)).build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_qps() {
        let t0 = Instant::now();
        let mut b = Bucket::new(10.0, 3, t0);
        for _ in 0..3 {
            assert_eq!(b.take(t0), Ok(()), "the burst");
        }
        let wait = b.take(t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "a token every 100 ms: {wait:?}");
        assert!(b.take(t0 + Duration::from_millis(99)).is_err());
        assert_eq!(b.take(t0 + Duration::from_millis(100)), Ok(()));
        // Idle for long: back to the burst, not beyond.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(b.take(later), Ok(()));
        }
        assert!(b.take(later).is_err());
        assert_eq!(Bucket::new(0.0, 1, t0).take(t0), Ok(()), "no limit");
    }

    /// A service answering its request.
    struct Echo;

    impl tower::Service<u32> for Echo {
        type Response = u32;
        type Error = ();
        type Future = std::future::Ready<Result<u32, ()>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ()>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, n: u32) -> Self::Future {
            std::future::ready(Ok(n))
        }
    }

    /// Through the layer, on a runtime whose clock is paused: 8 requests
    /// at 4 a second after a burst of 2 take 1.5 s of its time.
    #[test]
    fn the_layer_waits_for_tokens() {
        use tower::{Layer, Service};
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        rt.block_on(async {
            let limit = Limit::new(4.0, 2);
            let mut svc = limit.layer(Echo);
            let start = tokio::time::Instant::now();
            for n in 0..8 {
                std::future::poll_fn(|cx| svc.poll_ready(cx)).await.unwrap();
                assert_eq!(svc.call(n).await, Ok(n));
            }
            let took = start.elapsed();
            assert!(took >= Duration::from_millis(1500) && took < Duration::from_millis(1600), "{took:?}");
        });
    }
}
