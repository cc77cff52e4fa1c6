//! A fake Kubernetes API server for tests: real HTTP/1.1 on loopback,
//! list (with `limit`/`continue` and a `resourceVersion`), watch (chunked
//! JSON events, bookmarks, `410 Gone` for a compacted version), and faults
//! on demand: drop every watch, fail the next requests, or go down. It
//! keeps objects as JSON, so any kind (and any CRD) can be served; a kind
//! that is not installed answers 404 like an absent CRD.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// A resource the fake serves: `/api/v1/<plural>` (core, empty group) or
/// `/apis/<group>/<version>/<plural>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// API group ("" for core).
    pub group: &'static str,
    /// Version.
    pub version: &'static str,
    /// Plural name in the path.
    pub plural: &'static str,
    /// Kind of the objects.
    pub kind: &'static str,
}

impl Resource {
    fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.to_owned() } else { format!("{}/{}", self.group, self.version) }
    }
}

#[derive(Debug, Clone)]
struct Event {
    rv: u64,
    plural: &'static str,
    kind: &'static str,
    object: Value,
}

#[derive(Debug, Default)]
struct State {
    rv: u64,
    installed: BTreeMap<&'static str, Resource>,
    /// (plural, namespace, name) -> object.
    objects: BTreeMap<(&'static str, String, String), Value>,
    log: Vec<Event>,
    /// Versions at or below this are gone: watching from them is 410.
    compacted: u64,
    /// Every change bumps this; open watches end when it moves.
    watch_epoch: u64,
    fail_next: usize,
    /// A dry-run write is refused with this (as a validating webhook's
    /// denial); `None`: dry runs succeed, nothing stored.
    deny_dry_runs: Option<String>,
    /// Dry-run writes seen.
    dry_runs: u64,
    down: bool,
    requests: u64,
    gone: u64,
    continued: u64,
    /// Tokens the TokenReview API knows: token -> (username, audiences).
    tokens: BTreeMap<String, (String, Vec<String>)>,
    /// Tokens bound to a pod: token -> (pod name, pod uid).
    pod_tokens: BTreeMap<String, (String, String)>,
    token_reviews: u64,
    /// Who may do what, for SubjectAccessReviews: (user, namespace, verb,
    /// resource).
    grants: std::collections::BTreeSet<(String, String, String, String)>,
    /// The SubjectAccessReviews asked, in order.
    access_reviews: Vec<Value>,
    /// Server-side applies: (plural, namespace, name, subresource, field
    /// manager, force).
    applies: Vec<(String, String, String, String, String, bool)>,
    conflicts: u64,
    /// Names made for `generateName` so far.
    generated: u64,
}

/// The fake server.
#[derive(Clone)]
pub struct FakeApi {
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
    addr: SocketAddr,
}

/// How often open watches get a BOOKMARK.
const BOOKMARK_EVERY: Duration = Duration::from_millis(200);

impl FakeApi {
    /// Starts on an ephemeral loopback port, on the current tokio runtime.
    pub async fn start() -> std::io::Result<FakeApi> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let api = FakeApi {
            state: Arc::new(Mutex::new(State { rv: 1, ..State::default() })),
            changed: Arc::new(Notify::new()),
            addr: listener.local_addr()?,
        };
        let served = api.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let api = served.clone();
                tokio::spawn(async move {
                    let _ = api.handle(stream).await;
                });
            }
        });
        Ok(api)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the TokenReview API authenticate `token` as `username`
    /// (`system:serviceaccount:<ns>:<sa>` for a service account) for
    /// `audiences`.
    pub fn add_token(&self, token: &str, username: &str, audiences: &[&str]) {
        let auds = audiences.iter().map(|a| (*a).to_owned()).collect();
        self.lock().tokens.insert(token.to_owned(), (username.to_owned(), auds));
    }

    /// [`FakeApi::add_token`] for a token bound to a pod, as a projected
    /// service account token is: the review's `user.extra` names the pod
    /// (`authentication.kubernetes.io/pod-name`, `pod-uid`).
    pub fn add_pod_token(&self, token: &str, username: &str, audiences: &[&str], pod: &str, uid: &str) {
        self.add_token(token, username, audiences);
        self.lock().pod_tokens.insert(token.to_owned(), (pod.to_owned(), uid.to_owned()));
    }

    /// TokenReviews answered.
    pub fn token_reviews(&self) -> u64 {
        self.lock().token_reviews
    }

    /// As the API server reviews `review` (a TokenReview): authenticated
    /// when the token is known and one of its audiences is asked for (or
    /// none is asked), with the groups a service account has.
    fn review(&self, review: &Value) -> Value {
        let mut s = self.lock();
        s.token_reviews += 1;
        let token = review["spec"]["token"].as_str().unwrap_or_default();
        let asked: Vec<String> = review["spec"]["audiences"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        let status = match s.tokens.get(token) {
            None => json!({"authenticated": false, "error": "[invalid bearer token, token lookup failed]"}),
            Some((_, auds)) if !asked.is_empty() && !asked.iter().any(|a| auds.contains(a)) => json!({
                "authenticated": false,
                "error": format!("[invalid bearer token, token audiences {auds:?} is invalid for the target audiences {asked:?}]"),
            }),
            Some((user, auds)) => {
                let mut groups = vec!["system:authenticated".to_owned()];
                if let Some(ns) = user.strip_prefix("system:serviceaccount:").and_then(|r| r.split(':').next()) {
                    groups.push("system:serviceaccounts".into());
                    groups.push(format!("system:serviceaccounts:{ns}"));
                }
                let mut user = json!({"username": user, "groups": groups});
                if let Some((pod, uid)) = s.pod_tokens.get(token) {
                    user["extra"] = json!({
                        "authentication.kubernetes.io/pod-name": [pod],
                        "authentication.kubernetes.io/pod-uid": [uid],
                    });
                }
                json!({"authenticated": true, "user": user, "audiences": auds})
            }
        };
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": review["spec"], "status": status})
    }

    /// Lets `user` do `verb` on `resource` in `namespace`, as RBAC would
    /// (what SubjectAccessReviews answer).
    pub fn grant(&self, user: &str, namespace: &str, verb: &str, resource: &str) {
        self.lock().grants.insert((user.into(), namespace.into(), verb.into(), resource.into()));
    }

    /// Takes back a [`FakeApi::grant`].
    pub fn revoke(&self, user: &str, namespace: &str, verb: &str, resource: &str) {
        self.lock().grants.remove(&(user.into(), namespace.into(), verb.into(), resource.into()));
    }

    /// The SubjectAccessReviews asked so far (their `spec`s).
    pub fn access_reviews(&self) -> Vec<Value> {
        self.lock().access_reviews.clone()
    }

    /// The server-side applies made so far: (plural, namespace, name,
    /// subresource, field manager, force).
    pub fn applies(&self) -> Vec<(String, String, String, String, String, bool)> {
        self.lock().applies.clone()
    }

    /// A server-side apply (`PATCH` with `application/apply-patch+yaml`),
    /// simplified: an absent object is created; a present one keeps what
    /// the applied configuration does not name (labels and annotations
    /// are merged key by key, other top-level fields replaced), with the
    /// resource version checked when the configuration carries one. On
    /// the `status` subresource only annotations and status are taken.
    fn apply_patch(
        &self,
        r: &Resource,
        ns: &str,
        name: &str,
        sub: &str,
        params: &BTreeMap<String, String>,
        body: &[u8],
    ) -> (u16, Value) {
        let Some(manager) = params.get("fieldManager").filter(|m| !m.is_empty()) else {
            return (400, status_json(400, "BadRequest", "PATCH, fieldManager is required for apply requests"));
        };
        let Ok(mut given) = serde_json::from_slice::<Value>(body) else {
            return (400, status_json(400, "BadRequest", "the body is not a JSON object"));
        };
        if !given.is_object() {
            return (400, status_json(400, "BadRequest", "the body is not a JSON object"));
        }
        if given["metadata"]["name"].as_str().is_some_and(|n| n != name) {
            return (400, status_json(400, "BadRequest", "the name in the body is not the one in the path"));
        }
        if given["kind"].as_str().is_some_and(|k| k != r.kind) {
            return (400, status_json(400, "BadRequest", &format!("the kind is not {}", r.kind)));
        }
        let force = params.get("force").is_some_and(|f| f == "true");
        let mut s = self.lock();
        s.applies.push((r.plural.to_owned(), ns.to_owned(), name.to_owned(), sub.to_owned(), manager.clone(), force));
        let key = (r.plural, ns.to_owned(), name.to_owned());
        let current = s.objects.get(&key).cloned();
        let version = given["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_owned();
        let object = match current {
            None if !sub.is_empty() => {
                return (404, status_json(404, "NotFound", &format!("{} {name:?} not found", r.plural)));
            }
            None => {
                given["metadata"]["name"] = json!(name);
                if !ns.is_empty() {
                    given["metadata"]["namespace"] = json!(ns);
                }
                if let Some(m) = given["metadata"].as_object_mut() {
                    m.remove("resourceVersion");
                }
                given
            }
            Some(cur) if !version.is_empty() && cur["metadata"]["resourceVersion"] != json!(version) => {
                s.conflicts += 1;
                drop(s);
                return (409, status_json(409, "Conflict", "the object has been modified"));
            }
            Some(mut cur) => {
                for k in ["labels", "annotations"] {
                    for (k2, v) in given["metadata"][k].as_object().cloned().unwrap_or_default() {
                        cur["metadata"][k][k2] = v;
                    }
                }
                if sub == "status" {
                    if given.get("status").is_some() {
                        cur["status"] = given["status"].clone();
                    }
                } else {
                    if let Some(refs) = given["metadata"].get("ownerReferences") {
                        cur["metadata"]["ownerReferences"] = refs.clone();
                    }
                    for (k, v) in given.as_object().cloned().unwrap_or_default() {
                        if !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind") {
                            cur[k] = v;
                        }
                    }
                }
                cur
            }
        };
        let stored = Self::store_locked(&mut s, r, object);
        drop(s);
        self.changed.notify_waiters();
        (200, stored)
    }

    /// An RFC 6902 JSON patch (the `test`, `replace`, `add` and `remove`
    /// operations at JSON pointers): a failed `test` answers 422, as the API
    /// server does, and nothing is changed.
    fn json_patch(&self, r: &Resource, ns: &str, name: &str, body: &[u8]) -> (u16, Value) {
        let Ok(Value::Array(ops)) = serde_json::from_slice::<Value>(body) else {
            return (400, status_json(400, "BadRequest", "the body is not a JSON patch"));
        };
        let mut s = self.lock();
        let key = (r.plural, ns.to_owned(), name.to_owned());
        let Some(mut object) = s.objects.get(&key).cloned() else {
            return (404, status_json(404, "NotFound", &format!("{} {name:?} not found", r.plural)));
        };
        for op in &ops {
            let path = op["path"].as_str().unwrap_or_default();
            let (parent, last) = path.rsplit_once('/').unwrap_or(("", path));
            let ok = match op["op"].as_str() {
                Some("test") => object.pointer(path) == Some(&op["value"]),
                Some("replace") => object.pointer_mut(path).map(|v| *v = op["value"].clone()).is_some(),
                Some("add") => match object.pointer_mut(parent) {
                    Some(Value::Object(m)) => {
                        m.insert(last.to_owned(), op["value"].clone());
                        true
                    }
                    _ => false,
                },
                Some("remove") => match object.pointer_mut(parent) {
                    Some(Value::Object(m)) => m.remove(last).is_some(),
                    _ => false,
                },
                _ => false,
            };
            if !ok {
                drop(s);
                return (422, status_json(422, "Invalid", &format!("the JSON patch failed at {path}")));
            }
        }
        let stored = Self::store_locked(&mut s, r, object);
        drop(s);
        self.changed.notify_waiters();
        (200, stored)
    }

    /// As the API server's authorizer answers a SubjectAccessReview.
    fn authorize(&self, review: &Value) -> Value {
        let mut s = self.lock();
        let spec = &review["spec"];
        s.access_reviews.push(spec.clone());
        let attr = &spec["resourceAttributes"];
        let field = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let key = (field(&spec["user"]), field(&attr["namespace"]), field(&attr["verb"]), field(&attr["resource"]));
        let status = if s.grants.contains(&key) {
            json!({"allowed": true, "reason": "granted by the fake API server"})
        } else {
            json!({"allowed": false})
        };
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec, "status": status})
    }

    /// Serves `r` (an absent kind answers 404, like a CRD not installed).
    pub fn install(&self, r: Resource) {
        self.lock().installed.insert(r.plural, r);
        self.changed.notify_waiters();
    }

    /// Creates or replaces an object (its kind must be installed).
    pub fn apply(&self, plural: &'static str, object: Value) {
        let installed = self.lock().installed.get(plural).cloned();
        let Some(r) = installed else { panic!("{plural} is not installed") };
        self.store(&r, object);
    }

    /// One object of `plural` in `ns`, as the API server holds it.
    pub fn get(&self, plural: &str, ns: &str, name: &str) -> Option<Value> {
        self.lock()
            .objects
            .iter()
            .find(|((p, o_ns, o_name), _)| *p == plural && o_ns == ns && o_name == name)
            .map(|(_, v)| v.clone())
    }

    /// Every object of `plural`, in every namespace.
    pub fn objects(&self, plural: &str) -> Vec<Value> {
        self.lock().objects.iter().filter(|((p, _, _), _)| *p == plural).map(|(_, v)| v.clone()).collect()
    }

    /// How many objects of `plural` there are, in every namespace.
    pub fn count(&self, plural: &str) -> usize {
        self.lock().objects.keys().filter(|(p, _, _)| *p == plural).count()
    }

    /// Writes that lost a race: 409 answers to creates of existing
    /// objects and to updates of an older `resourceVersion`.
    pub fn conflicts(&self) -> u64 {
        self.lock().conflicts
    }

    /// Stores `object` as a new version: a new `resourceVersion`, an ADDED
    /// or MODIFIED event; returns what is stored.
    fn store(&self, r: &Resource, object: Value) -> Value {
        let mut s = self.lock();
        let stored = Self::store_locked(&mut s, r, object);
        drop(s);
        self.changed.notify_waiters();
        stored
    }

    /// [`FakeApi::store`] under a lock already held.
    fn store_locked(s: &mut State, r: &Resource, mut object: Value) -> Value {
        let plural = r.plural;
        s.rv += 1;
        let rv = s.rv;
        object["apiVersion"] = json!(r.api_version());
        object["kind"] = json!(r.kind);
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        let ns = object["metadata"]["namespace"].as_str().unwrap_or_default().to_owned();
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        if object["metadata"]["uid"].is_null() {
            object["metadata"]["uid"] = json!(format!("uid-{plural}-{ns}-{name}"));
        }
        let existed = s.objects.insert((plural, ns, name), object.clone()).is_some();
        let kind = r.kind;
        s.log.push(Event {
            rv,
            plural,
            kind,
            object: json!({"type": if existed { "MODIFIED" } else { "ADDED" }, "object": object.clone()}),
        });
        object
    }

    /// A create (POST to a namespaced collection) or an update (PUT to an
    /// object) with the API server's concurrency rules: a create of a
    /// name that exists is 409 AlreadyExists; an update of an absent
    /// object is 404, and one whose `resourceVersion` is not the stored
    /// one is 409 Conflict.
    /// PUT on `.../<name>/status`: the stored object with the body's
    /// `status`, if the body's `resourceVersion` (when given) is current.
    fn write_status(&self, r: &Resource, ns: &str, name: &str, body: &[u8]) -> (u16, Value) {
        let Ok(given) = serde_json::from_slice::<Value>(body) else {
            return (400, status_json(400, "BadRequest", "the body is not a JSON object"));
        };
        let current = self.lock().objects.get(&(r.plural, ns.to_owned(), name.to_owned())).cloned();
        let Some(mut object) = current else {
            return (404, status_json(404, "NotFound", &format!("{} {name:?} not found", r.plural)));
        };
        let version = given["metadata"]["resourceVersion"].as_str().unwrap_or_default();
        if !version.is_empty() && object["metadata"]["resourceVersion"] != json!(version) {
            self.lock().conflicts += 1;
            return (409, status_json(409, "Conflict", "the object has been modified"));
        }
        object["status"] = given["status"].clone();
        let mut s = self.lock();
        (200, Self::store_locked(&mut s, r, object))
    }

    fn write(&self, r: &Resource, ns: &str, name: Option<&str>, body: &[u8]) -> (u16, Value) {
        let Ok(mut object) = serde_json::from_slice::<Value>(body) else {
            return (400, status_json(400, "BadRequest", "the body is not a JSON object"));
        };
        if !object.is_object() {
            return (400, status_json(400, "BadRequest", "the body is not a JSON object"));
        }
        match object["metadata"]["namespace"].as_str() {
            Some(given) if given != ns => {
                let msg = "the namespace of the provided object does not match the namespace sent on the request";
                return (400, status_json(400, "BadRequest", msg));
            }
            _ if ns.is_empty() => {}
            _ => object["metadata"]["namespace"] = json!(ns),
        }
        if name.is_none() && object["metadata"]["resourceVersion"].as_str().is_some_and(|v| !v.is_empty()) {
            return (
                500,
                status_json(500, "InternalError", "resourceVersion should not be set on objects to be created"),
            );
        }
        // `generateName` on a create: the prefix and a suffix never used.
        if name.is_none()
            && object["metadata"]["name"].as_str().is_none_or(str::is_empty)
            && let Some(prefix) = object["metadata"]["generateName"].as_str().filter(|p| !p.is_empty())
        {
            let n = {
                let mut s = self.lock();
                s.generated += 1;
                s.generated
            };
            object["metadata"]["name"] = json!(format!("{prefix}{n:05x}"));
        }
        let Some(obj_name) = object["metadata"]["name"].as_str().map(str::to_owned) else {
            return (422, status_json(422, "Invalid", "metadata.name is required"));
        };
        let key = (r.plural, ns.to_owned(), obj_name.clone());
        // Looked up, compared and stored under one lock, as etcd's
        // compare-and-swap.
        let mut s = self.lock();
        let current = s.objects.get(&key).cloned();
        let answer = match (name, current) {
            (None, Some(_)) => {
                s.conflicts += 1;
                let msg = format!("{} {obj_name:?} already exists", r.plural);
                (409, status_json(409, "AlreadyExists", &msg))
            }
            (None, None) => (201, Self::store_locked(&mut s, r, object)),
            (Some(name), _) if name != obj_name => {
                (400, status_json(400, "BadRequest", "the name in the body is not the one in the path"))
            }
            (Some(_), None) => (404, status_json(404, "NotFound", &format!("{} {obj_name:?} not found", r.plural))),
            (Some(_), Some(cur)) => {
                let given = object["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_owned();
                if !given.is_empty() && cur["metadata"]["resourceVersion"] != json!(given) {
                    s.conflicts += 1;
                    let msg = format!(
                        "Operation cannot be fulfilled on {} {obj_name:?}: the object has been modified; please apply your changes to the latest version and try again",
                        r.plural
                    );
                    (409, status_json(409, "Conflict", &msg))
                } else {
                    object["metadata"]["uid"] = cur["metadata"]["uid"].clone();
                    // The status is its subresource's: a body without one
                    // leaves it as it is.
                    if object.get("status").is_none()
                        && let Some(status) = cur.get("status")
                    {
                        object["status"] = status.clone();
                    }
                    (200, Self::store_locked(&mut s, r, object))
                }
            }
        };
        let wrote = matches!(answer.0, 200 | 201);
        drop(s);
        if wrote {
            self.changed.notify_waiters();
        }
        answer
    }

    /// Deletes an object.
    pub fn delete(&self, plural: &'static str, ns: &str, name: &str) {
        let mut s = self.lock();
        let Some(mut object) = s.objects.remove(&(plural, ns.to_owned(), name.to_owned())) else { return };
        s.rv += 1;
        let rv = s.rv;
        object["metadata"]["resourceVersion"] = json!(rv.to_string());
        let kind = s.installed.get(plural).map_or("", |r| r.kind);
        s.log.push(Event { rv, plural, kind, object: json!({"type": "DELETED", "object": object}) });
        drop(s);
        self.changed.notify_waiters();
    }

    /// A DELETE: the object as it was, 404 when absent, 409 when the body's
    /// `preconditions.resourceVersion` is not the stored one.
    fn delete_request(&self, r: &Resource, ns: &str, name: &str, body: &[u8]) -> (u16, Value) {
        let options: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let want = options["preconditions"]["resourceVersion"].as_str().map(str::to_owned);
        let key = (r.plural, ns.to_owned(), name.to_owned());
        let current = self.lock().objects.get(&key).cloned();
        let Some(current) = current else {
            return (404, status_json(404, "NotFound", &format!("{} {name:?} not found", r.plural)));
        };
        if let Some(want) = want.filter(|w| current["metadata"]["resourceVersion"] != json!(w)) {
            let msg = format!(
                "Operation cannot be fulfilled on {} {name:?}: Precondition failed: ResourceVersion: Invalid value: {want:?}",
                r.plural
            );
            return (409, status_json(409, "Conflict", &msg));
        }
        self.delete(r.plural, ns, name);
        (200, current)
    }

    /// Forgets the event history (like etcd compaction): a watch from an
    /// older version gets 410 Gone and the client must relist.
    pub fn compact(&self) {
        let mut s = self.lock();
        s.compacted = s.rv;
        s.log.clear();
    }

    /// Ends every open watch (the client re-watches from its last version).
    pub fn drop_watches(&self) {
        self.lock().watch_epoch += 1;
        self.changed.notify_waiters();
    }

    /// Fails the next `n` requests with 500.
    pub fn fail_next(&self, n: usize) {
        self.lock().fail_next = n;
    }

    /// From now on dry-run writes (`?dryRun=All`) are refused with
    /// `message` (as the API server relays a validating webhook's denial),
    /// or, with `None`, succeed without storing anything (no webhook).
    pub fn deny_dry_runs(&self, message: Option<&str>) {
        self.lock().deny_dry_runs = message.map(str::to_owned);
    }

    /// Dry-run writes seen.
    pub fn dry_runs(&self) -> u64 {
        self.lock().dry_runs
    }

    /// An outage: every request fails with 503 (and open watches end)
    /// until `set_down(false)`.
    pub fn set_down(&self, down: bool) {
        let mut s = self.lock();
        s.down = down;
        s.watch_epoch += 1;
        drop(s);
        self.changed.notify_waiters();
    }

    /// Watches answered with 410 Gone so far.
    pub fn gone(&self) -> u64 {
        self.lock().gone
    }

    /// List requests that carried a `continue` token (pages after the first).
    pub fn continued(&self) -> u64 {
        self.lock().continued
    }

    /// Requests served so far.
    pub fn requests(&self) -> u64 {
        self.lock().requests
    }

    async fn handle(&self, mut stream: TcpStream) -> std::io::Result<()> {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut chunk).await?;
            if n == 0 || buf.len() > 64 * 1024 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let head = String::from_utf8_lossy(&buf).into_owned();
        let target = head.lines().next().and_then(|l| l.split(' ').nth(1)).unwrap_or("/").to_owned();
        let method = head.split(' ').next().unwrap_or("GET").to_owned();
        // The body follows the head: what was read with it, then the rest.
        let length: usize = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let content_type = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-type:").map(|v| v.trim().to_owned()))
            .unwrap_or_default();
        let at = buf.windows(4).position(|w| w == b"\r\n\r\n").map_or(buf.len(), |i| i + 4);
        let mut body = buf[at..].to_vec();
        while body.len() < length.min(1 << 20) {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
        if method == "POST" && target.starts_with("/apis/authentication.k8s.io/v1/tokenreviews") {
            if self.lock().down {
                self.lock().requests += 1;
                return respond(
                    &mut stream,
                    503,
                    &status_json(503, "ServiceUnavailable", "the fake API server is down"),
                )
                .await;
            }
            let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let answer = self.review(&review);
            return respond(&mut stream, 201, &answer).await;
        }
        if method == "GET" && target == "/version" {
            let v = json!({"major": "1", "minor": "30", "gitVersion": "v1.30.0-fake", "platform": "linux/amd64"});
            return respond(&mut stream, 200, &v).await;
        }
        if method == "POST" && target.starts_with("/apis/authorization.k8s.io/v1/subjectaccessreviews") {
            let review: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let answer = self.authorize(&review);
            return respond(&mut stream, 201, &answer).await;
        }
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let params: BTreeMap<String, String> = query
            .split('&')
            .filter_map(|p| p.split_once('=').map(|(k, v)| (k.to_owned(), percent_decode(v))))
            .collect();
        let fault = {
            let mut s = self.lock();
            s.requests += 1;
            if s.down {
                Some((503, status_json(503, "ServiceUnavailable", "the fake API server is down")))
            } else if s.fail_next > 0 {
                s.fail_next -= 1;
                Some((500, status_json(500, "InternalError", "injected failure")))
            } else {
                None
            }
        };
        if let Some((code, body)) = fault {
            return respond(&mut stream, code, &body).await;
        }
        let mut segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        // Istio's and the Gateway API's Gateways share a plural: the
        // latter is kept under its own (see `gateway_api_resources`).
        if segs.get(1) == Some(&istiod_config::gateway_api::GROUP) {
            let at = if segs.get(3) == Some(&"namespaces") { 5 } else { 3 };
            if let Some(s) = segs.get_mut(at).filter(|s| **s == "gateways") {
                *s = K8S_GATEWAYS;
            }
        }
        // The status subresource: only `status` of the body is stored
        // (the API server's rule), with the same version check as a PUT.
        // A CertificateSigningRequest's `approval` is one too (it writes
        // the conditions).
        let status_of = match segs.as_slice() {
            ["apis", _, _, "namespaces", ns, plural, name, "status"]
            | ["api", "v1", "namespaces", ns, plural, name, "status"] => Some((*ns, *plural, *name)),
            ["apis", _, _, plural, name, "status"] => Some(("", *plural, *name)),
            ["apis", "certificates.k8s.io", _, plural @ "certificatesigningrequests", name, "approval"] => {
                Some(("", *plural, *name))
            }
            _ => None,
        };
        if let Some((ns, plural, name)) = status_of {
            let resource = self.lock().installed.get(plural).cloned();
            let (code, body) = match (method.as_str(), resource) {
                ("PUT", Some(r)) => self.write_status(&r, ns, name, &body),
                ("PATCH", Some(r)) if content_type == "application/apply-patch+yaml" => {
                    self.apply_patch(&r, ns, name, "status", &params, &body)
                }
                (_, None) => (404, status_json(404, "NotFound", "the server could not find the requested resource")),
                _ => (405, status_json(405, "MethodNotAllowed", "not served")),
            };
            return respond(&mut stream, code, &body).await;
        }
        let (plural, namespace, name) = match segs.as_slice() {
            ["api", "v1", "namespaces", ns, plural, name] | ["apis", _, _, "namespaces", ns, plural, name] => {
                (*plural, Some(*ns), Some(*name))
            }
            ["api", "v1", "namespaces", ns, plural] | ["apis", _, _, "namespaces", ns, plural] => {
                (*plural, Some(*ns), None)
            }
            ["api", "v1", plural] | ["apis", _, _, plural] => (*plural, None, None),
            // A cluster-scoped object (a Namespace, a webhook configuration).
            ["api", "v1", plural, name] | ["apis", _, _, plural, name] => (*plural, None, Some(*name)),
            _ => return respond(&mut stream, 404, &status_json(404, "NotFound", "no such path")).await,
        };
        let resource = self.lock().installed.get(plural).cloned();
        let Some(resource) = resource else {
            return respond(
                &mut stream,
                404,
                &status_json(404, "NotFound", "the server could not find the requested resource"),
            )
            .await;
        };
        let dry_run = params.get("dryRun").is_some_and(|d| d == "All");
        match (method.as_str(), namespace, name) {
            ("POST", _, None) | ("PUT", _, Some(_)) if dry_run => {
                let deny = {
                    let mut s = self.lock();
                    s.dry_runs += 1;
                    s.deny_dry_runs.clone()
                };
                return match deny {
                    Some(m) => respond(&mut stream, 400, &status_json(400, "BadRequest", &m)).await,
                    None => {
                        let object: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        respond(&mut stream, 201, &object).await
                    }
                };
            }
            ("POST", ns, None) | ("PUT", ns, Some(_)) => {
                let (code, body) = self.write(&resource, ns.unwrap_or_default(), name, &body);
                return respond(&mut stream, code, &body).await;
            }
            ("DELETE", ns, Some(name)) => {
                let (code, body) = self.delete_request(&resource, ns.unwrap_or_default(), name, &body);
                return respond(&mut stream, code, &body).await;
            }
            ("GET", ns, Some(name)) => {
                return match self.get(plural, ns.unwrap_or_default(), name) {
                    Some(o) => respond(&mut stream, 200, &o).await,
                    None => {
                        let msg = format!("{plural} {name:?} not found");
                        respond(&mut stream, 404, &status_json(404, "NotFound", &msg)).await
                    }
                };
            }
            ("PATCH", ns, Some(name)) if content_type == "application/apply-patch+yaml" => {
                let (code, body) = self.apply_patch(&resource, ns.unwrap_or_default(), name, "", &params, &body);
                return respond(&mut stream, code, &body).await;
            }
            ("PATCH", ns, Some(name)) if content_type == "application/json-patch+json" => {
                let (code, body) = self.json_patch(&resource, ns.unwrap_or_default(), name, &body);
                return respond(&mut stream, code, &body).await;
            }
            ("PATCH", _, _) => {
                return respond(
                    &mut stream,
                    415,
                    &status_json(415, "UnsupportedMediaType", "only server-side apply and JSON patches are served"),
                )
                .await;
            }
            ("GET", _, None) => {}
            _ => return respond(&mut stream, 405, &status_json(405, "MethodNotAllowed", "not served")).await,
        }
        if params.get("watch").is_some_and(|w| w == "true" || w == "1") {
            self.watch(stream, resource, namespace.map(str::to_owned), &params).await
        } else {
            let body = self.list(&resource, namespace, &params);
            respond(&mut stream, 200, &body).await
        }
    }

    fn list(&self, r: &Resource, ns: Option<&str>, params: &BTreeMap<String, String>) -> Value {
        let mut s = self.lock();
        if params.contains_key("continue") {
            s.continued += 1;
        }
        let items: Vec<&Value> = s
            .objects
            .iter()
            .filter(|((p, o_ns, _), _)| *p == r.plural && ns.is_none_or(|n| n == o_ns))
            .map(|(_, v)| v)
            .filter(|v| params.get("labelSelector").is_none_or(|sel| labels_match(sel, &v["metadata"]["labels"])))
            .collect();
        let start: usize = params.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
        let limit: usize = params.get("limit").and_then(|l| l.parse().ok()).filter(|l| *l > 0).unwrap_or(usize::MAX);
        let page: Vec<Value> = items.iter().skip(start).take(limit).map(|v| (*v).clone()).collect();
        let mut meta = json!({ "resourceVersion": s.rv.to_string() });
        if start.saturating_add(limit) < items.len() {
            meta["continue"] = json!((start + limit).to_string());
        }
        json!({ "apiVersion": r.api_version(), "kind": format!("{}List", r.kind), "metadata": meta, "items": page })
    }

    async fn watch(
        &self,
        mut stream: TcpStream,
        r: Resource,
        ns: Option<String>,
        params: &BTreeMap<String, String>,
    ) -> std::io::Result<()> {
        let mut cursor: u64 = params.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
        let bookmarks = params.get("allowWatchBookmarks").is_some_and(|v| v == "true");
        let timeout = Duration::from_secs(params.get("timeoutSeconds").and_then(|t| t.parse().ok()).unwrap_or(290));
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            .await?;
        let deadline = tokio::time::Instant::now() + timeout;
        let epoch = self.lock().watch_epoch;
        let compacted = self.lock().compacted;
        if cursor < compacted {
            self.lock().gone += 1;
            let status = status_json(410, "Expired", &format!("too old resource version: {cursor} ({compacted})"));
            chunk(&mut stream, &json!({"type": "ERROR", "object": status})).await?;
            return stream.write_all(b"0\r\n\r\n").await;
        }
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (events, ended, rv) = {
                let s = self.lock();
                let events: Vec<Event> = s
                    .log
                    .iter()
                    .filter(|e| e.rv > cursor && e.plural == r.plural)
                    .filter(|e| ns.as_deref().is_none_or(|n| e.object["object"]["metadata"]["namespace"] == n))
                    .cloned()
                    .collect();
                (events, s.watch_epoch != epoch || s.down, s.rv)
            };
            if ended {
                return Ok(()); // dropped mid-stream: no terminating chunk, like a broken connection
            }
            for e in &events {
                chunk(&mut stream, &e.object).await?;
                cursor = e.rv;
            }
            let tick = tokio::time::sleep(BOOKMARK_EVERY);
            tokio::select! {
                _ = notified => {}
                _ = tick => {
                    if bookmarks && rv > cursor {
                        cursor = rv;
                        let kind = events.first().map_or(r.kind, |e| e.kind);
                        let obj = json!({"apiVersion": r.api_version(), "kind": kind, "metadata": {"resourceVersion": rv.to_string()}});
                        chunk(&mut stream, &json!({"type": "BOOKMARK", "object": obj})).await?;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return stream.write_all(b"0\r\n\r\n").await,
            }
        }
    }
}

fn status_json(code: u16, reason: &str, message: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code})
}

async fn chunk(stream: &mut TcpStream, v: &Value) -> std::io::Result<()> {
    let mut body = serde_json::to_vec(v).unwrap_or_default();
    body.push(b'\n');
    stream.write_all(format!("{:x}\r\n", body.len()).as_bytes()).await?;
    stream.write_all(&body).await?;
    stream.write_all(b"\r\n").await?;
    stream.flush().await
}

async fn respond(stream: &mut TcpStream, status: u16, body: &Value) -> std::io::Result<()> {
    let body = serde_json::to_vec(body).unwrap_or_default();
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        match status {
            200 => "OK",
            201 => "Created",
            404 => "Not Found",
            409 => "Conflict",
            _ => "Error",
        },
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&body).await?;
    stream.shutdown().await
}

/// The core resources the model reads (Secrets: gateway credentials).
pub fn core_resources() -> Vec<Resource> {
    vec![
        Resource { group: "", version: "v1", plural: "services", kind: "Service" },
        Resource { group: "discovery.k8s.io", version: "v1", plural: "endpointslices", kind: "EndpointSlice" },
        Resource { group: "", version: "v1", plural: "pods", kind: "Pod" },
        Resource { group: "", version: "v1", plural: "nodes", kind: "Node" },
        Resource { group: "", version: "v1", plural: "namespaces", kind: "Namespace" },
        Resource { group: "", version: "v1", plural: "secrets", kind: "Secret" },
        Resource { group: "", version: "v1", plural: "configmaps", kind: "ConfigMap" },
    ]
}

/// What istiod writes: its CA Secret, the root ConfigMaps, the election
/// Lease.
pub fn write_resources() -> Vec<Resource> {
    vec![
        Resource { group: "", version: "v1", plural: "secrets", kind: "Secret" },
        Resource { group: "", version: "v1", plural: "configmaps", kind: "ConfigMap" },
        Resource { group: "coordination.k8s.io", version: "v1", plural: "leases", kind: "Lease" },
    ]
}

/// Whether `labels` satisfy an equality-based label selector
/// (`k=v`, `k==v`, `k!=v`, `k`, `!k`, joined by commas).
fn labels_match(selector: &str, labels: &Value) -> bool {
    selector.split(',').map(str::trim).filter(|t| !t.is_empty()).all(|term| {
        if let Some((k, v)) = term.split_once("!=") {
            labels[k.trim()].as_str() != Some(v.trim())
        } else if let Some((k, v)) = term.split_once('=') {
            labels[k.trim()].as_str() == Some(v.trim_start_matches('=').trim())
        } else if let Some(k) = term.strip_prefix('!') {
            labels.get(k.trim()).is_none()
        } else {
            labels.get(term).is_some()
        }
    })
}

/// A query value with its `%XX` escapes decoded.
fn percent_decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (b[i], b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What the Gateway API's deployment controller applies.
pub fn deployment_resources() -> Vec<Resource> {
    vec![
        Resource { group: "apps", version: "v1", plural: "deployments", kind: "Deployment" },
        Resource { group: "", version: "v1", plural: "serviceaccounts", kind: "ServiceAccount" },
        Resource { group: "", version: "v1", plural: "services", kind: "Service" },
        Resource {
            group: "autoscaling",
            version: "v2",
            plural: "horizontalpodautoscalers",
            kind: "HorizontalPodAutoscaler",
        },
        Resource { group: "policy", version: "v1", plural: "poddisruptionbudgets", kind: "PodDisruptionBudget" },
    ]
}

/// What this fake stores the Gateway API's Gateways under (its URLs say
/// `gateways`, as Istio's do): pass it to [`FakeApi::apply`].
pub const K8S_GATEWAYS: &str = "k8s-gateways";

/// The Kubernetes Gateway API's kinds.
pub fn gateway_api_resources() -> Vec<Resource> {
    let g = |version, kind, plural| Resource { group: "gateway.networking.k8s.io", version, plural, kind };
    vec![
        g("v1", "GatewayClass", "gatewayclasses"),
        g("v1", "Gateway", K8S_GATEWAYS),
        g("v1", "HTTPRoute", "httproutes"),
        g("v1", "GRPCRoute", "grpcroutes"),
        g("v1beta1", "ReferenceGrant", "referencegrants"),
        g("v1alpha2", "TCPRoute", "tcproutes"),
        g("v1alpha2", "TLSRoute", "tlsroutes"),
        g("v1", "BackendTLSPolicy", "backendtlspolicies"),
        g("v1", "ListenerSet", "listenersets"),
    ]
}

/// The webhook configurations istiod patches (cluster-scoped).
pub fn webhook_resources() -> Vec<Resource> {
    let a = |kind, plural| Resource { group: "admissionregistration.k8s.io", version: "v1", plural, kind };
    vec![
        a("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
        a("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
    ]
}

/// Istio's CRDs (v1).
pub fn istio_resources() -> Vec<Resource> {
    let n = |kind, plural| Resource { group: "networking.istio.io", version: "v1", plural, kind };
    let s = |kind, plural| Resource { group: "security.istio.io", version: "v1", plural, kind };
    vec![
        n("VirtualService", "virtualservices"),
        n("DestinationRule", "destinationrules"),
        n("Gateway", "gateways"),
        n("ServiceEntry", "serviceentries"),
        n("WorkloadEntry", "workloadentries"),
        n("Sidecar", "sidecars"),
        s("PeerAuthentication", "peerauthentications"),
        s("AuthorizationPolicy", "authorizationpolicies"),
        s("RequestAuthentication", "requestauthentications"),
        Resource { group: "networking.istio.io", version: "v1alpha3", plural: "envoyfilters", kind: "EnvoyFilter" },
        n("WorkloadGroup", "workloadgroups"),
        Resource { group: "networking.istio.io", version: "v1beta1", plural: "proxyconfigs", kind: "ProxyConfig" },
        Resource { group: "telemetry.istio.io", version: "v1", plural: "telemetries", kind: "Telemetry" },
        Resource { group: "extensions.istio.io", version: "v1alpha1", plural: "wasmplugins", kind: "WasmPlugin" },
        Resource {
            group: "extensions.istio.io",
            version: "v1alpha1",
            plural: "trafficextensions",
            kind: "TrafficExtension",
        },
    ]
}
