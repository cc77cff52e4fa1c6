//! istiod's registration authority over the Kubernetes CSR API
//! (`EXTERNAL_CA=ISTIOD_RA_KUBERNETES_API`, `K8S_SIGNER`;
//! security/pkg/pki/ra/k8s_ra.go and security/pkg/k8s/chiron): a checked
//! workload CSR becomes a `CertificateSigningRequest` for the signer,
//! approved by istiod itself; the signer (outside istiod) writes the
//! certificate to its status, which is read back, and the object deleted.
//! The cores queue requests here; the control thread's task talks to the
//! API server.

use std::time::{Duration, Instant};

use base64::Engine as _;
use istiod_kubewatch::kapi::{Api, Write};
use serde_json::{Value, json};
use tokio::sync::mpsc;

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
    /// The signed certificate PEM (as the signer wrote it), or why not.
    pub reply: async_channel::Sender<Result<String, String>>,
}

/// The signer's root: `./etc/external-ca-cert/root-cert.pem`, else the
/// service account's `ca.crt` (istiod's `createIstioRA`), refused in
/// istiod's words when neither holds a certificate.
pub fn root(external: &std::path::Path, service_account: &std::path::Path) -> Result<String, String> {
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

/// Answers the cores' requests until they are gone, `signer` signing.
pub async fn run(api: Api, signer: String, wait: Duration, mut rx: mpsc::UnboundedReceiver<Request>) {
    let in_flight: std::rc::Rc<std::cell::Cell<usize>> = Default::default();
    while let Some(r) = rx.recv().await {
        if in_flight.get() >= MAX_IN_FLIGHT {
            let _ = r.reply.try_send(Err(format!("{MAX_IN_FLIGHT} CSRs in flight to the Kubernetes signer")));
            continue;
        }
        in_flight.set(in_flight.get() + 1);
        let (api, signer, in_flight) = (api.clone(), signer.clone(), in_flight.clone());
        tokio::task::spawn_local(async move {
            let result = sign(&api, &signer, &r.csr, r.lifetime_secs, wait).await;
            in_flight.set(in_flight.get() - 1);
            if let Err(e) = &result {
                tracing::warn!(target: "pkira", signer, error = %e, "Kubernetes CSR signing failed");
            }
            let _ = r.reply.try_send(result);
        });
    }
}

/// chiron's `SignCSRK8s` with approval: create, approve, wait for the
/// certificate, delete (whatever happened).
async fn sign(
    api: &Api,
    signer: &str,
    csr: &str,
    lifetime_secs: Option<i64>,
    wait: Duration,
) -> Result<String, String> {
    let mut object = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-workload-"},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(csr),
            "signerName": signer,
            "usages": ["digital signature", "key encipherment", "server auth", "client auth"],
        },
    });
    if let Some(secs) = lifetime_secs {
        object["spec"]["expirationSeconds"] = json!(secs);
    }
    let created = match api.create(CSRS, &object).await {
        Ok(Write::Done(v)) => v,
        Ok(Write::Conflict) => return Err("failed to create CSR: it exists".into()),
        Err(e) => return Err(format!("failed to create CSR: {e}")),
    };
    let Some(name) = created["metadata"]["name"].as_str().map(str::to_owned) else {
        return Err("failed to create CSR: the API server named none".into());
    };
    tracing::debug!(target: "pkira", csr = name, "CSR has been created");
    let result = approve_and_read(api, &name, created, wait).await;
    match api.delete(&format!("{CSRS}/{name}"), None).await {
        Ok(_) => tracing::debug!(target: "pkira", csr = name, "deleted CSR"),
        Err(e) => tracing::error!(target: "pkira", csr = name, error = %e, "failed to delete CSR"),
    }
    result
}

async fn approve_and_read(api: &Api, name: &str, mut csr: Value, wait: Duration) -> Result<String, String> {
    let message = format!("CSR ({name}) for the certificate () is approved");
    let condition = json!({"type": "Approved", "status": "True", "reason": message, "message": message});
    match csr["status"]["conditions"].as_array_mut() {
        Some(c) => c.push(condition),
        None => csr["status"] = json!({"conditions": [condition]}),
    }
    match api.replace(&format!("{CSRS}/{name}/approval"), &csr).await {
        Ok(Write::Done(_)) => {}
        Ok(Write::Conflict) => return Err(format!("failed to approve CSR request: CSR {name} changed")),
        Err(e) => return Err(format!("failed to approve CSR request: {e}")),
    }
    // chiron watches the one object; its status is read here, the wait
    // between reads growing from 20 ms to half a second.
    let deadline = Instant::now() + wait;
    let mut pause = Duration::from_millis(20);
    loop {
        if let Some(o) = api.get(&format!("{CSRS}/{name}")).await? {
            if let Some(b64) = o["status"]["certificate"].as_str().filter(|c| !c.is_empty()) {
                let pem = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .filter(|p| p.contains("-----BEGIN CERTIFICATE-----"))
                    .ok_or_else(|| "decoding certificate failed".to_owned())?;
                return Ok(pem);
            }
            // A signer that refused: said at once, not after the wait.
            let refused = o["status"]["conditions"].as_array().into_iter().flatten().find(|c| {
                matches!(c["type"].as_str(), Some("Denied" | "Failed")) && c["status"].as_str() == Some("True")
            });
            if let Some(c) = refused {
                return Err(format!(
                    "CSR {name} {}: {}",
                    c["type"].as_str().unwrap_or_default().to_lowercase(),
                    c["message"].as_str().or(c["reason"].as_str()).unwrap_or_default()
                ));
            }
        }
        if Instant::now() >= deadline {
            return Err(format!("timeout when watching CSR {name}"));
        }
        tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}
