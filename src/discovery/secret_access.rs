//! istiod's `CredentialsController.Authorize`
//! (`pilot/pkg/credentials/kube/secrets.go`), on the control thread: a
//! gateway reads a `kubernetes://` credential (not only a CA) only if its
//! service account may `list` `secrets` in its namespace, which the API
//! server says through a SubjectAccessReview for
//! `system:serviceaccount:<ns>:<sa>`. The cores ask when they meet a
//! service account without an answer (`SecretAccess::allows`); the answer
//! becomes part of the model and the namespace's SDS names are pushed.
//!
//! As istiod caches them: an allowed answer holds five minutes, a refusal
//! (or an API server that could not answer) one minute; then, if a gateway
//! read it meanwhile, the service account is reviewed again (the answer
//! holding until the new one comes) and a changed answer is pushed; an
//! answer nobody read is dropped (istiod's `clearExpiredCache`). At most
//! [`MAX_ANSWERS`] service accounts are kept (only verified gateways ask,
//! so a few in practice).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::sources::{State, Tx};
use istiod_mesh::model::credentials::{Answer, SecretAccess};

/// Service accounts with an answer, at most.
pub(super) const MAX_ANSWERS: usize = 4096;
/// Reviews in flight at once.
const MAX_IN_FLIGHT: usize = 16;

/// How long answers hold (istiod's `cacheTTL`: a minute, five for an
/// allowed one).
#[derive(Debug, Clone, Copy)]
pub(super) struct Ttl {
    pub(super) allowed: Duration,
    pub(super) denied: Duration,
}

impl Ttl {
    /// istiod's.
    pub(super) fn istiod() -> Ttl {
        Ttl { allowed: Duration::from_secs(300), denied: Duration::from_secs(60) }
    }
}

/// The review istiod makes.
fn review_body(namespace: &str, sa: &str) -> Value {
    json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "resourceAttributes": {"namespace": namespace, "verb": "list", "resource": "secrets"},
            "user": format!("system:serviceaccount:{namespace}:{sa}"),
        },
    })
}

/// Asks the API server; `Err` with istiod's message when not allowed.
async fn review(api: &istiod_kubewatch::kapi::Api, namespace: &str, sa: &str) -> Result<(), String> {
    let path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    match api.create(path, &review_body(namespace, sa)).await? {
        istiod_kubewatch::kapi::Write::Done(v) if v["status"]["allowed"].as_bool() == Some(true) => Ok(()),
        istiod_kubewatch::kapi::Write::Done(v) => Err(format!(
            "{sa}/{namespace} is not authorized to read secrets: {}",
            v["status"]["reason"].as_str().unwrap_or_default()
        )),
        istiod_kubewatch::kapi::Write::Conflict => Err(format!("{path}: 409")),
    }
}

/// Answers the cores' questions until they are gone.
pub(super) async fn run(
    api: istiod_kubewatch::kapi::Api,
    mut asks: mpsc::UnboundedReceiver<(String, String)>,
    state: std::rc::Rc<RefCell<State>>,
    tx: Tx,
    ttl: Ttl,
) {
    // (namespace, service account) → (the answer, until when).
    let mut answers: BTreeMap<(String, String), (Answer, Instant)> = BTreeMap::new();
    let mut asked: BTreeSet<(String, String)> = BTreeSet::new();
    let (done_tx, mut done) = mpsc::unbounded_channel::<((String, String), Result<(), String>)>();
    let mut in_flight = 0usize;
    let mut waiting: Vec<(String, String)> = Vec::new();
    let every = ttl.allowed.min(ttl.denied).min(Duration::from_secs(10)).max(Duration::from_millis(100));
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            ask = asks.recv() => {
                let Some(key) = ask else { return };
                if !answers.contains_key(&key) && asked.len() < MAX_ANSWERS && asked.insert(key.clone()) {
                    waiting.push(key);
                }
            }
            Some((key, result)) = done.recv() => {
                in_flight -= 1;
                asked.remove(&key);
                let allowed = result.is_ok();
                match &result {
                    Err(e) => tracing::warn!(target: "ads", namespace = %key.0, service_account = %key.1, "{e}"),
                    Ok(()) => tracing::info!(target: "ads", namespace = %key.0, service_account = %key.1, "gateway may read the Secrets of its namespace"),
                }
                let until = Instant::now() + if allowed { ttl.allowed } else { ttl.denied };
                if answers.len() >= MAX_ANSWERS && !answers.contains_key(&key) {
                    // The one due soonest makes room (it would be asked again).
                    if let Some(k) = answers.iter().min_by_key(|(_, (_, u))| *u).map(|(k, _)| k.clone()) {
                        answers.remove(&k);
                    }
                }
                let answer = match answers.get(&key) {
                    // Same answer: its use is still tracked.
                    Some((a, _)) if a.allowed == allowed => a.clone(),
                    _ => Answer::new(allowed),
                };
                let before = answers.insert(key.clone(), (answer, until)).map(|(a, _)| a.allowed);
                if before != Some(allowed) {
                    publish(&state, &tx, &answers, Some(&key.0));
                }
            }
            _ = tick.tick() => {
                // Expired answers a gateway read are reviewed again (the
                // last one holds meanwhile); the others are dropped.
                let now = Instant::now();
                let before = answers.len();
                answers.retain(|key, (a, until)| {
                    if *until > now || asked.contains(key) {
                        return true;
                    }
                    if !a.used.swap(false, std::sync::atomic::Ordering::Relaxed) {
                        return false;
                    }
                    if asked.len() < MAX_ANSWERS && asked.insert(key.clone()) {
                        waiting.push(key.clone());
                    }
                    true
                });
                if answers.len() != before {
                    // Nobody reads these: nothing to push.
                    publish(&state, &tx, &answers, None);
                }
            }
        }
        while in_flight < MAX_IN_FLIGHT {
            let Some((ns, sa)) = waiting.pop() else { break };
            in_flight += 1;
            let (api, done_tx) = (api.clone(), done_tx.clone());
            tokio::task::spawn_local(async move {
                let result = review(&api, &ns, &sa).await;
                let _ = done_tx.send(((ns, sa), result));
            });
        }
    }
}

/// Makes `answers` the ones in force and pushes the SDS names of
/// `namespace`, whose gateways they concern (none: nothing to push).
fn publish(
    state: &RefCell<State>,
    tx: &Tx,
    answers: &BTreeMap<(String, String), (Answer, Instant)>,
    namespace: Option<&str>,
) {
    let mut s = state.borrow_mut();
    let access = Arc::new(SecretAccess {
        asks: s.secret_access.asks.clone(),
        answers: answers.iter().map(|(k, (a, _))| (k.clone(), a.clone())).collect(),
    });
    s.secret_access = access.clone();
    let Some(prev) = s.mesh.clone() else { return };
    let next = Arc::new(prev.with_secret_access(access));
    s.mesh = Some(next.clone());
    s.published = Some((Arc::downgrade(&next), s.objects.clone()));
    let touched =
        namespace.map(|ns| istiod_mesh::generator::router::secret_names_in(&next.model, ns)).unwrap_or_default();
    let _ = tx.send(crate::control::Input {
        changes: Vec::new(),
        mesh: Some(next),
        touched,
        reasons: istiod_xds_api::Reasons::one("secret"),
        full: false,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_review_is_istiods() {
        let b = review_body("istio-system", "ingress");
        assert_eq!(b["spec"]["user"], "system:serviceaccount:istio-system:ingress");
        assert_eq!(
            b["spec"]["resourceAttributes"],
            json!({"namespace": "istio-system", "verb": "list", "resource": "secrets"})
        );
    }

    /// Against a fake API server, with short lifetimes: a service account
    /// asked about twice is reviewed once; a grant taken back is seen
    /// once the allowed answer expires, and the namespace's credentials
    /// are pushed each time the answer changes.
    #[test]
    fn answers_are_cached_then_reviewed_again_and_changes_pushed() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        tokio::task::LocalSet::new().block_on(&rt, async {
            let fake = istiod_kubewatch::fake::FakeApi::start().await.unwrap();
            let user = "system:serviceaccount:edge:gw";
            fake.grant(user, "edge", "list", "secrets");
            let config = kube::Config::new(fake.url().parse().unwrap());
            let api = istiod_kubewatch::kapi::Api::new(kube::Client::try_from(config).unwrap());
            let (asks, asked) = mpsc::unbounded_channel();
            let state = std::rc::Rc::new(RefCell::new(State::default()));
            state.borrow_mut().secret_access = Arc::new(SecretAccess {
                asks: Some(istiod_mesh::model::credentials::Asks::new(move |ns, sa| {
                    let _ = asks.send((ns, sa));
                })),
                ..Default::default()
            });
            let mut objs = istiod_config::objects::Objects::default();
            let secret = istiod_config::objects::Secret {
                metadata: istiod_config::meta::Meta {
                    name: "cert".into(),
                    namespace: Some("edge".into()),
                    ..Default::default()
                },
                ..Default::default()
            };
            objs.secrets.push(secret);
            state.borrow_mut().mesh = Some(istiod_mesh::update::build(&objs, "cluster.local", &Arc::default()));
            let (tx, mut rx) = mpsc::unbounded_channel();
            let ttl = Ttl { allowed: Duration::from_millis(300), denied: Duration::from_millis(300) };
            tokio::task::spawn_local(run(api, asked, state.clone(), tx, ttl));
            let access = state.borrow().secret_access.clone();
            assert_eq!(access.allows("edge", "gw"), None, "asked");
            assert_eq!(access.allows("edge", "gw"), None, "asked again while the review runs");
            let input = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
            let mesh = input.mesh.unwrap();
            assert_eq!(mesh.model.secret_access.allows("edge", "gw"), Some(true));
            assert!(input.touched.iter().any(|(_, n)| &**n == "kubernetes://cert"), "{:?}", input.touched);
            assert_eq!(fake.access_reviews().len(), 1);
            fake.revoke(user, "edge", "list", "secrets");
            // Read (by the allows above): reviewed again once expired.
            let input = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
            let mesh = input.mesh.unwrap();
            assert_eq!(mesh.model.secret_access.allows("edge", "gw"), Some(false), "revoked");
            let reviews = fake.access_reviews().len();
            assert!(reviews >= 2);
            // Read once more (above), then no more: reviewed once again,
            // then dropped once expired unread.
            let gone = tokio::time::timeout(Duration::from_secs(5), async {
                loop {
                    let input = rx.recv().await.unwrap();
                    if input.mesh.as_ref().is_some_and(|m| m.model.secret_access.answers.is_empty()) {
                        return input;
                    }
                }
            })
            .await
            .expect("the unread answer is dropped");
            assert!(gone.touched.is_empty(), "nothing to push: {:?}", gone.touched);
            let settled = fake.access_reviews().len();
            tokio::time::sleep(Duration::from_millis(400)).await;
            assert_eq!(fake.access_reviews().len(), settled, "no more reviews for an answer nobody reads");
        });
    }
}
