//! The few Kubernetes writes the CA makes (its Secret, the root
//! ConfigMaps, the election Lease), as JSON over the kube client, with the
//! API server's concurrency answers kept apart: 404 is "absent", 409 is
//! "someone else wrote first".

use std::time::Duration;

use serde_json::Value;

/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The API server.
#[derive(Clone)]
pub struct Api {
    client: kube::Client,
}

/// What a write came to.
#[derive(Debug)]
pub enum Write {
    /// Written: the object as stored.
    Done(Value),
    /// 409: the object exists (create) or changed since it was read
    /// (update).
    Conflict,
}

impl Api {
    /// Over `client`.
    pub fn new(client: kube::Client) -> Api {
        Api { client }
    }

    async fn send(&self, method: http::Method, path: &str, body: Option<&Value>) -> Result<Result<Value, u16>, String> {
        self.send_as(method, path, body, "application/json").await
    }

    async fn send_as(
        &self,
        method: http::Method,
        path: &str,
        body: Option<&Value>,
        content_type: &str,
    ) -> Result<Result<Value, u16>, String> {
        let mut req = http::Request::builder().method(method.clone()).uri(path);
        let body = match body {
            Some(b) => {
                req = req.header("content-type", content_type);
                serde_json::to_vec(b).unwrap_or_default()
            }
            None => Vec::new(),
        };
        let req = req.body(body).map_err(|e| e.to_string())?;
        match tokio::time::timeout(TIMEOUT, self.client.request::<Value>(req)).await {
            Err(_) => Err(format!("{method} {path}: timed out")),
            Ok(Ok(v)) => Ok(Ok(v)),
            // (422 only for a JSON patch's failed `test`: elsewhere the
            // API server's reason is kept.)
            Ok(Err(kube::Error::Api(status)))
                if matches!(status.code, 404 | 409)
                    || (status.code == 422 && content_type == "application/json-patch+json") =>
            {
                Ok(Err(status.code))
            }
            Ok(Err(e)) => Err(format!("{method} {path}: {e}")),
        }
    }

    /// An RFC 6902 JSON patch of the object at `path` (`patch` verb): a
    /// failed `test` operation (422) or a conflict is [`Write::Conflict`].
    pub async fn json_patch(&self, path: &str, ops: &Value) -> Result<Write, String> {
        match self.send_as(http::Method::PATCH, path, Some(ops), "application/json-patch+json").await? {
            Ok(v) => Ok(Write::Done(v)),
            Err(409 | 422) => Ok(Write::Conflict),
            Err(code) => Err(format!("PATCH {path}: {code}")),
        }
    }

    /// The object at `path`, `None` when absent.
    pub async fn get(&self, path: &str) -> Result<Option<Value>, String> {
        match self.send(http::Method::GET, path, None).await? {
            Ok(v) => Ok(Some(v)),
            Err(404) => Ok(None),
            Err(code) => Err(format!("GET {path}: {code}")),
        }
    }

    /// Creates `object` in the collection at `path`.
    pub async fn create(&self, path: &str, object: &Value) -> Result<Write, String> {
        match self.send(http::Method::POST, path, Some(object)).await? {
            Ok(v) => Ok(Write::Done(v)),
            Err(409) => Ok(Write::Conflict),
            Err(code) => Err(format!("POST {path}: {code}")),
        }
    }

    /// Server-side applies `object` at `path` as `manager`, taking over
    /// fields others own (`force`); the object as stored.
    pub async fn apply(&self, path: &str, object: &Value, manager: &str) -> Result<Value, String> {
        let uri = format!("{path}?fieldManager={}&force=true", manager.replace('/', "%2F"));
        let req = http::Request::builder()
            .method(http::Method::PATCH)
            .uri(&uri)
            .header("content-type", "application/apply-patch+yaml")
            .body(serde_json::to_vec(object).unwrap_or_default())
            .map_err(|e| e.to_string())?;
        match tokio::time::timeout(TIMEOUT, self.client.request::<Value>(req)).await {
            Err(_) => Err(format!("PATCH {path}: timed out")),
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(format!("PATCH {path}: {e}")),
        }
    }

    /// Deletes the object at `path` if its `resourceVersion` is still
    /// `resource_version` (any, when `None`).
    pub async fn delete(&self, path: &str, resource_version: Option<&str>) -> Result<Deleted, String> {
        let options = match resource_version {
            Some(rv) => {
                serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"resourceVersion": rv}})
            }
            None => serde_json::json!({"kind": "DeleteOptions", "apiVersion": "v1"}),
        };
        match self.send(http::Method::DELETE, path, Some(&options)).await? {
            Ok(_) => Ok(Deleted::Done),
            Err(404) => Ok(Deleted::Gone),
            Err(409) => Ok(Deleted::Conflict),
            Err(code) => Err(format!("DELETE {path}: {code}")),
        }
    }

    /// Replaces the object at `path` with `object`, whose
    /// `metadata.resourceVersion` must still be the stored one.
    pub async fn replace(&self, path: &str, object: &Value) -> Result<Write, String> {
        match self.send(http::Method::PUT, path, Some(object)).await? {
            Ok(v) => Ok(Write::Done(v)),
            Err(409) => Ok(Write::Conflict),
            Err(404) => Err(format!("PUT {path}: 404, the object is gone")),
            Err(code) => Err(format!("PUT {path}: {code}")),
        }
    }
}

/// What a delete came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Deleted {
    /// Deleted.
    Done,
    /// 404: it was not there.
    Gone,
    /// 409: it changed since it was read.
    Conflict,
}

/// The `istio.io/rev` value of `revision` (`REVISION`): empty is istiod's
/// `default` revision.
pub fn revision_label(revision: &str) -> &str {
    if revision.is_empty() { "default" } else { revision }
}
