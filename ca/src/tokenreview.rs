//! istiod's Kubernetes JWT authenticator (`kubeauth/kube_jwt.go`,
//! `k8s/tokenreview/k8sauthn.go`): the caller's bearer token is reviewed by
//! the API server (a TokenReview for `TOKEN_AUDIENCES`, `istio-ca` by
//! default); an authenticated service account is the identity. Runs on the
//! control thread, which owns the Kubernetes client; the serving cores
//! send it [`Review`]s. Results are cached until the token expires, at
//! most five minutes (a token revoked with its pod stops working soon) and
//! 100,000 tokens, so a restart storm costs one review per pod; a failed
//! or unreachable review is not cached. At most 256 reviews are in flight;
//! more are answered UNAVAILABLE at once (the agent retries), so random
//! tokens cannot flood the API server or this thread.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use tokio::sync::mpsc;

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The API server says no, or the user is not a service account.
    Denied(String),
    /// The API server could not be asked.
    Unavailable(String),
}

/// Who a reviewed token is: its service account and, for a token bound to
/// a pod (a projected token), that pod (`user.extra`
/// `authentication.kubernetes.io/pod-name` and `pod-uid`, istiod's
/// `KubernetesInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// The service account's namespace.
    pub namespace: String,
    /// The service account.
    pub service_account: String,
    /// The pod's name and uid.
    pub pod: Option<(String, String)>,
}

/// One review the cores ask for: the token, and where to answer.
pub struct Review {
    /// The bearer token.
    pub token: String,
    /// The answer.
    pub reply: async_channel::Sender<Result<Account, Refusal>>,
}

/// How long a review may take (the Kubernetes client retries an API
/// server that answers 503; the caller's agent retries too).
const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// Cached results, bounded.
const MAX_CACHED: usize = 100_000;
const MAX_CACHE_TIME: Duration = Duration::from_secs(300);
/// Reviews in flight at once.
const MAX_IN_FLIGHT: usize = 256;

/// The token's `exp` claim, unverified (only to bound the cache: the API
/// server verified the token).
fn expiry(token: &str) -> Option<u64> {
    let payload = token.split('.').nth(1)?;
    let v: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    v["exp"].as_u64()
}

/// Asks the API server about `token` for `audiences`.
async fn review(client: &kube::Client, token: &str, audiences: &[String]) -> Result<Account, Refusal> {
    let body = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token, "audiences": audiences},
    });
    let req = http::Request::post("/apis/authentication.k8s.io/v1/tokenreviews")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap_or_default())
        .map_err(|e| Refusal::Unavailable(e.to_string()))?;
    let res: serde_json::Value = tokio::time::timeout(REVIEW_TIMEOUT, client.request(req))
        .await
        .map_err(|_| Refusal::Unavailable("TokenReview timed out".into()))?
        .map_err(|e| Refusal::Unavailable(format!("TokenReview: {e}")))?;
    let status = &res["status"];
    if let Some(e) = status["error"].as_str().filter(|e| !e.is_empty()) {
        return Err(Refusal::Denied(format!("the service account authentication returns an error: {e}")));
    }
    if status["authenticated"].as_bool() != Some(true) {
        return Err(Refusal::Denied("the token is not authenticated".into()));
    }
    let groups = status["user"]["groups"].as_array().cloned().unwrap_or_default();
    if !groups.iter().any(|g| g == "system:serviceaccounts") {
        return Err(Refusal::Denied("the token is not a service account".into()));
    }
    let user = status["user"]["username"].as_str().unwrap_or_default();
    let extra = |k: &str| status["user"]["extra"][k][0].as_str().map(str::to_owned);
    let pod = extra("authentication.kubernetes.io/pod-name").zip(extra("authentication.kubernetes.io/pod-uid"));
    match user.split(':').collect::<Vec<_>>().as_slice() {
        ["system", "serviceaccount", ns, sa] if !ns.is_empty() && !sa.is_empty() => {
            Ok(Account { namespace: (*ns).to_owned(), service_account: (*sa).to_owned(), pod })
        }
        _ => Err(Refusal::Denied(format!("invalid username field in the token review result: {user:?}"))),
    }
}

/// Reviewed tokens: the service account, and until when the answer holds.
type Cache = HashMap<String, (Account, Instant)>;

/// Answers the cores' reviews until they are gone.
pub async fn run(client: kube::Client, audiences: Vec<String>, mut rx: mpsc::UnboundedReceiver<Review>) {
    let cache: std::rc::Rc<std::cell::RefCell<Cache>> = Default::default();
    let in_flight: std::rc::Rc<std::cell::Cell<usize>> = Default::default();
    while let Some(r) = rx.recv().await {
        let now = Instant::now();
        let hit = cache.borrow().get(&r.token).filter(|(_, until)| *until > now).map(|(id, _)| id.clone());
        if let Some(id) = hit {
            let _ = r.reply.try_send(Ok(id));
            continue;
        }
        if in_flight.get() >= MAX_IN_FLIGHT {
            let _ = r.reply.try_send(Err(Refusal::Unavailable(format!("{MAX_IN_FLIGHT} token reviews in flight"))));
            continue;
        }
        in_flight.set(in_flight.get() + 1);
        let (client, audiences, cache, in_flight) =
            (client.clone(), audiences.clone(), cache.clone(), in_flight.clone());
        tokio::task::spawn_local(async move {
            let result = review(&client, &r.token, &audiences).await;
            in_flight.set(in_flight.get() - 1);
            if let Ok(id) = &result {
                let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                let left = expiry(&r.token)
                    .map_or(Duration::from_secs(60), |exp| Duration::from_secs(exp.saturating_sub(wall.as_secs())));
                let mut c = cache.borrow_mut();
                if c.len() >= MAX_CACHED {
                    let now = Instant::now();
                    c.retain(|_, (_, until)| *until > now);
                    if c.len() >= MAX_CACHED {
                        c.clear();
                    }
                }
                c.insert(r.token.clone(), (id.clone(), Instant::now() + left.min(MAX_CACHE_TIME)));
            }
            let _ = r.reply.try_send(result);
        });
    }
}
