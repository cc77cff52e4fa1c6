//! istiod's registration authority over the Kubernetes CSR API
//! (`EXTERNAL_CA=ISTIOD_RA_KUBERNETES_API`, `K8S_SIGNER`;
//! security/pkg/pki/ra/k8s_ra.go and security/pkg/k8s/chiron): a checked
//! workload CSR becomes a `CertificateSigningRequest` for the signer,
//! approved by istiod itself; the signer (outside istiod) writes the
//! certificate to its status, which is read back, and the object deleted.
//! The cores queue requests here; the control thread's task talks to the
//! API server.

use std::collections::HashMap;
use std::time::Duration;

use base64::Engine as _;
use istiod_kubewatch::kapi::{Api, Write};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// `EXTERNAL_CA`'s one permitted value.
pub const KUBERNETES_API: &str = "ISTIOD_RA_KUBERNETES_API";

/// Where istiod looks for the signer's root first (relative to its working
/// directory; ra.DefaultExtCACertDir and the root ConfigMap's key).
pub const EXTERNAL_CA_ROOT: &str = "./etc/external-ca-cert/root-cert.pem";

/// Then the cluster's own CA (the `kubernetes.io/legacy-unknown` signer's).
pub const SERVICE_ACCOUNT_CA: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

/// How long a signed certificate is waited for (chiron's
/// `certWatchTimeout`).
pub const CERT_WAIT: Duration = Duration::from_secs(60);

/// CSRs waiting on the API server at once; more are refused at once
/// rather than queued without bound.
const MAX_IN_FLIGHT: usize = 256;

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/// One workload CSR to have signed.
#[derive(Debug)]
pub struct Request {
    /// The PEM CSR, already checked against the caller's identities.
    pub csr: String,
    /// The lifetime asked for (`spec.expirationSeconds`), none: the
    /// signer's default.
    pub lifetime_secs: Option<i64>,
    /// The request's own signer (`<CERT_SIGNER_DOMAIN>/<CertSigner>`),
    /// none: `K8S_SIGNER`.
    pub signer: Option<String>,
    /// The signed certificate PEM (as the signer wrote it), or why not.
    pub reply: async_channel::Sender<Result<String, String>>,
}

/// The signer's root: `./etc/external-ca-cert/root-cert.pem`, else the
/// service account's `ca.crt` (istiod's `createIstioRA`), refused in
/// istiod's words when neither holds a certificate.
pub fn root(external: &std::path::Path, service_account: &std::path::Path, domain: bool) -> Result<String, String> {
    if domain && !external.exists() {
        // istiod's createIstioRA with CERT_SIGNER_DOMAIN: no file, no root
        // ("CA cert file not found - ignoring"); answers find theirs.
        tracing::info!(target: "pkira", path = %external.display(), "CA cert file not found - ignoring");
        return Ok(String::new());
    }
    let path = if external.exists() { external } else { service_account };
    let refused = || "failed to create an K8s CA: error processing Certificate Bundle for Kubernetes RA".to_owned();
    let pem = std::fs::read_to_string(path).map_err(|e| {
        tracing::error!(target: "pkira", path = %path.display(), error = %e, "cannot read the signer's root");
        refused()
    })?;
    if !pem.contains("-----BEGIN CERTIFICATE-----") {
        return Err(refused());
    }
    tracing::info!(target: "pkira", path = %path.display(), "the Kubernetes RA's root");
    Ok(pem)
}

/// The label this RA puts on its CSRs, so that one labelled list a tick
/// reads the status of every CSR it waits on (chiron watches each one; a
/// list per CSR would spend the client's QPS on polling).
pub const RA_LABEL: (&str, &str) = ("istio.io/ra", "istiod");

/// CSRs approved and waiting for the signer: name to where the answer goes.
type Waiting = std::rc::Rc<std::cell::RefCell<HashMap<String, oneshot::Sender<Result<String, String>>>>>;

/// Answers the cores' requests until they are gone, `signer` signing.
pub async fn run(api: Api, signer: String, wait: Duration, mut rx: mpsc::UnboundedReceiver<Request>) {
    let in_flight: std::rc::Rc<std::cell::Cell<usize>> = Default::default();
    let waiting: Waiting = Default::default();
    let news = std::rc::Rc::new(tokio::sync::Notify::new());
    let poller = tokio::task::spawn_local(poll(api.clone(), waiting.clone(), news.clone()));
    while let Some(r) = rx.recv().await {
        if in_flight.get() >= MAX_IN_FLIGHT {
            let _ = r.reply.try_send(Err(format!("{MAX_IN_FLIGHT} CSRs in flight to the Kubernetes signer")));
            continue;
        }
        in_flight.set(in_flight.get() + 1);
        let (api, signer, in_flight) = (api.clone(), signer.clone(), in_flight.clone());
        let (waiting, news) = (waiting.clone(), news.clone());
        tokio::task::spawn_local(async move {
            let signer = r.signer.unwrap_or(signer);
            let result = sign(&api, &signer, &r.csr, r.lifetime_secs, wait, &waiting, &news).await;
            in_flight.set(in_flight.get() - 1);
            if let Err(e) = &result {
                tracing::warn!(target: "pkira", signer, error = %e, "Kubernetes CSR signing failed");
            }
            let _ = r.reply.try_send(result);
        });
    }
    poller.abort();
}

/// chiron's `SignCSRK8s` with approval: create, approve, wait for the
/// certificate, delete (whatever happened).
async fn sign(
    api: &Api,
    signer: &str,
    csr: &str,
    lifetime_secs: Option<i64>,
    wait: Duration,
    waiting: &Waiting,
    news: &tokio::sync::Notify,
) -> Result<String, String> {
    let mut object = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-workload-", "labels": {RA_LABEL.0: RA_LABEL.1}},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(csr),
            "signerName": signer,
            "usages": ["digital signature", "key encipherment", "server auth", "client auth"],
        },
    });
    if let Some(secs) = lifetime_secs {
        object["spec"]["expirationSeconds"] = json!(secs);
    }
    let (name, created) = create_csr(api, &object).await?;
    tracing::debug!(target: "pkira", csr = name, "CSR has been created");
    let result = match approve(api, &name, created, "").await {
        Ok(()) => {
            let (tx, rx) = oneshot::channel();
            waiting.borrow_mut().insert(name.clone(), tx);
            news.notify_one();
            let answer = tokio::time::timeout(wait, rx).await;
            waiting.borrow_mut().remove(&name);
            match answer {
                Ok(Ok(r)) => r,
                _ => Err(format!("timeout when watching CSR {name}")),
            }
        }
        Err(e) => Err(e),
    };
    delete_csr(api, &name).await;
    result
}

/// Creates a `CertificateSigningRequest`: its name (the API server makes
/// it) and the object as stored.
async fn create_csr(api: &Api, object: &Value) -> Result<(String, Value), String> {
    let created = match api.create(CSRS, object).await {
        Ok(Write::Done(v)) => v,
        Ok(Write::Conflict) => return Err("failed to create CSR: it exists".into()),
        Err(e) => return Err(format!("failed to create CSR: {e}")),
    };
    let Some(name) = created["metadata"]["name"].as_str().map(str::to_owned) else {
        return Err("failed to create CSR: the API server named none".into());
    };
    Ok((name, created))
}

/// chiron's `cleanupCSR`: the CSR is deleted, whatever happened; a failure
/// is logged.
async fn delete_csr(api: &Api, name: &str) {
    match api.delete(&format!("{CSRS}/{name}"), None).await {
        Ok(_) => tracing::debug!(target: "pkira", csr = name, "deleted CSR"),
        Err(e) => tracing::error!(target: "pkira", csr = name, error = %e, "failed to delete CSR"),
    }
}

async fn approve(api: &Api, name: &str, mut csr: Value, dns_names: &str) -> Result<(), String> {
    let message = format!("CSR ({name}) for the certificate ({dns_names}) is approved");
    let condition = json!({"type": "Approved", "status": "True", "reason": message, "message": message});
    match csr["status"]["conditions"].as_array_mut() {
        Some(c) => c.push(condition),
        None => csr["status"] = json!({"conditions": [condition]}),
    }
    match api.replace(&format!("{CSRS}/{name}/approval"), &csr).await {
        Ok(Write::Done(_)) => Ok(()),
        Ok(Write::Conflict) => Err(format!("failed to approve CSR request: CSR {name} changed")),
        Err(e) => Err(format!("failed to approve CSR request: {e}")),
    }
}

/// Reads the status of every waiting CSR with one labelled list a tick,
/// the ticks from 20 ms after news growing to half a second, and none
/// while nothing waits; news brings the next list no nearer than 20 ms, so
/// a burst of CSRs shares one list. Each signed or refused CSR's waiter is
/// answered.
async fn poll(api: Api, waiting: Waiting, news: std::rc::Rc<tokio::sync::Notify>) {
    let path = format!("{CSRS}?labelSelector={}%3D{}", RA_LABEL.0.replace('/', "%2F"), RA_LABEL.1);
    const FIRST: Duration = Duration::from_millis(20);
    let mut pause = FIRST;
    let mut next = tokio::time::Instant::now() + FIRST;
    loop {
        if waiting.borrow().is_empty() {
            news.notified().await;
            pause = FIRST;
            next = tokio::time::Instant::now() + FIRST;
        }
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = news.notified() => {
                pause = FIRST;
                next = next.min(tokio::time::Instant::now() + FIRST);
                continue;
            }
        }
        pause = (pause * 2).min(Duration::from_millis(500));
        next = tokio::time::Instant::now() + pause;
        let list = match api.get(&path).await {
            Ok(Some(l)) => l,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(target: "pkira", error = %e, "listing CSRs failed");
                continue;
            }
        };
        for item in list["items"].as_array().into_iter().flatten() {
            let Some(name) = item["metadata"]["name"].as_str() else { continue };
            if !waiting.borrow().contains_key(name) {
                continue;
            }
            if let Some(answer) = outcome(name, item)
                && let Some(tx) = waiting.borrow_mut().remove(name)
            {
                let _ = tx.send(answer);
            }
        }
    }
}

/// What a CSR's status says: its certificate, or its refusal; none while
/// the signer has not answered.
fn outcome(name: &str, o: &Value) -> Option<Result<String, String>> {
    if let Some(b64) = o["status"]["certificate"].as_str().filter(|c| !c.is_empty()) {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .filter(|p| p.contains("-----BEGIN CERTIFICATE-----"))
            .ok_or_else(|| "decoding certificate failed".to_owned());
        return Some(pem);
    }
    // A signer that refused: said at once, not after the wait.
    let refused =
        o["status"]["conditions"].as_array().into_iter().flatten().find(|c| {
            matches!(c["type"].as_str(), Some("Denied" | "Failed")) && c["status"].as_str() == Some("True")
        })?;
    Some(Err(format!(
        "CSR {name} {}: {}",
        refused["type"].as_str().unwrap_or_default().to_lowercase(),
        refused["message"].as_str().or(refused["reason"].as_str()).unwrap_or_default()
    )))
}

/// istiod's own serving certificate from the Kubernetes signer `signer`
/// (chiron's `GenKeyCertK8sCA`, `PILOT_CERT_PROVIDER=k8s.io/<signer>`): a
/// new key, a CSR for `dns_names` with the usages digital signature, key
/// encipherment and server auth, approved by istiod, the certificate read
/// back (one CSR, read by itself) and the object deleted. Returns (chain
/// PEM, key PEM).
pub async fn sign_serving(
    api: &Api,
    signer: &str,
    dns_names: &[String],
    lifetime_secs: i64,
    wait: Duration,
) -> Result<(String, String), String> {
    let key = rcgen::KeyPair::generate().map_err(|e| format!("CSR generation error ({e})"))?;
    let mut params =
        rcgen::CertificateParams::new(dns_names.to_vec()).map_err(|e| format!("CSR generation error ({e})"))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    let csr =
        params.serialize_request(&key).and_then(|r| r.pem()).map_err(|e| format!("CSR generation error ({e})"))?;
    let object = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-workload-"},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(&csr),
            "signerName": signer,
            "usages": ["digital signature", "key encipherment", "server auth"],
            "expirationSeconds": lifetime_secs,
        },
    });
    let (name, created) = create_csr(api, &object).await?;
    let chain = match approve(api, &name, created, &dns_names.join(",")).await {
        Ok(()) => read_one(api, &name, wait).await,
        Err(e) => Err(e),
    };
    delete_csr(api, &name).await;
    Ok((chain?, key.serialize_pem()))
}

/// One CSR's certificate, read by itself until the signer answers or
/// `wait` passes (the wait between reads growing from 20 ms to half a
/// second).
async fn read_one(api: &Api, name: &str, wait: Duration) -> Result<String, String> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut pause = Duration::from_millis(20);
    loop {
        match api.get(&format!("{CSRS}/{name}")).await {
            Ok(Some(o)) => {
                if let Some(answer) = outcome(name, &o) {
                    return answer;
                }
            }
            Ok(None) => return Err(format!("CSR {name} is gone")),
            Err(e) => tracing::warn!(target: "pkira", csr = name, error = %e, "reading the CSR failed"),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("timeout when watching CSR {name}"));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}
