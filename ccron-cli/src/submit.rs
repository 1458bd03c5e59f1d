//! Mutations as signed requests: the operator's key signs a `ScheduleRequest` in the node's
//! request format (`ccron_node::request`), the CLI submits it to every node (whichever proposes
//! next has it; the pools dedupe by digest and execution by `(client, number)`), then reads the
//! result back from every node until f+1 return it identically. The request is signed for the
//! nodes' chain: its signing domain ([`ccron_node::crypto::SigningDomain`]) is read from
//! `GET /v1/chain` and believed when f+1 nodes answer it identically ([`chain_domain`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use ccron::schedule::ScheduleRequest;
use ccron_node::api::{ChainInfo, ChainQuorum};
use ccron_node::crypto::SigningDomain;
use ccron_node::request::{ClientRequest, client_id};
use ccron_node::results::RequestResult;
use ed25519_dalek::SigningKey;
use hyper::Method;
use tokio::time::Instant;

use crate::CliError;
use crate::http::Http;

/// Reads an operator key: 32 bytes as 64 hex characters (the node's `secret.key` format).
///
/// # Errors
/// [`CliError::KeyFile`].
pub fn read_key(path: &Path) -> Result<SigningKey, CliError> {
    let meta = std::fs::metadata(path)
        .map_err(|e| CliError::KeyFile(format!("{}: {e}", path.display())))?;
    if meta.len() > 1024 {
        return Err(CliError::KeyFile(format!(
            "{}: not a key file (over 1 KiB)",
            path.display()
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::KeyFile(format!("{}: {e}", path.display())))?;
    let secret = ccron_node::types::unhex32(text.trim())
        .ok_or_else(|| CliError::KeyFile(format!("{}: not 32 hex bytes", path.display())))?;
    Ok(SigningKey::from_bytes(&secret))
}

/// The nodes' signing domain: `GET /v1/chain` from every node, believed when `quorum` nodes
/// answer it identically (a `404`, from a node built before the route, is domain 1).
///
/// # Errors
/// [`CliError::Unreachable`] without such a quorum, [`CliError::Disagreement`] when two
/// quorums name different chains, [`CliError::Args`] for a domain this build does not know.
pub async fn chain_domain(
    http: &Http,
    nodes: &[String],
    quorum: usize,
) -> Result<SigningDomain, CliError> {
    let mut infos = Vec::new();
    let mut failures = Vec::new();
    for n in nodes {
        let url = format!("{}/v1/chain", n.trim_end_matches('/'));
        match http.send(Method::GET, &url, Vec::new()).await {
            Ok((200, b)) => match serde_json::from_slice::<ChainInfo>(&b) {
                Ok(c) => infos.push(c),
                Err(e) => failures.push(format!("{n}: {e}")),
            },
            // A node built before the route existed: its chain signs in domain 1.
            Ok((404, _)) => infos.push(ChainInfo {
                chain_id: String::new(),
                signing_domain: 1,
            }),
            Ok((code, _)) => failures.push(format!("{n}: status {code}")),
            Err(e) => failures.push(format!("{n}: {e}")),
        }
    }
    match ChainInfo::believed(infos, quorum) {
        ChainQuorum::Agreed(info) => info
            .domain()
            .map_err(|e| CliError::Args(format!("the nodes' signing domain: {e}"))),
        ChainQuorum::Conflict => Err(CliError::Disagreement(
            "two quorums of nodes name different chains".into(),
        )),
        ChainQuorum::NoQuorum => Err(CliError::Unreachable(format!(
            "fewer than {} nodes agree on the chain: {}",
            quorum.max(1),
            failures.join("; ")
        ))),
    }
}

/// What a submitted mutation came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The client id the ledger saw (256 bits).
    pub client: ccron::ClientId,
    /// The request number.
    pub number: u64,
    /// The height that executed it.
    pub height: u64,
    /// The ledger's reply.
    pub reply: String,
    /// Nodes that returned it.
    pub agreeing: usize,
}

/// Signs `req` as request `number` of `key`'s client for the nodes' chain ([`chain_domain`]),
/// submits it to every node and waits (at most `wait_ms`) until `quorum` nodes return its
/// result identically.
///
/// # Errors
/// [`CliError::Unreachable`] when no node admitted it, [`CliError::Timeout`] when no quorum
/// result came in time, [`CliError::Disagreement`] when nodes returned different results.
pub async fn submit(
    http: &Http,
    nodes: &[String],
    quorum: usize,
    key: &SigningKey,
    number: u64,
    req: &ScheduleRequest,
    wait_ms: u64,
) -> Result<Outcome, CliError> {
    let payload = ccron::codec::to_blob(req).map_err(|e| CliError::Args(e.to_string()))?;
    let domain = chain_domain(http, nodes, quorum).await?;
    let signed = ClientRequest {
        client_key: key.verifying_key().to_bytes(),
        number,
        payload,
    }
    .sign(&domain, key);
    signed
        .verify(&domain)
        .map_err(|e| CliError::Args(format!("request: {e}")))?;
    let body = signed.encode();
    let client = client_id(&key.verifying_key().to_bytes());
    let mut admitted = 0;
    let mut failures = Vec::new();
    for n in nodes {
        let url = format!("{}/v1/requests", n.trim_end_matches('/'));
        match http.send(Method::POST, &url, body.clone()).await {
            // Admitted, or already pending / executed there (409).
            Ok((202 | 409, _)) => admitted += 1,
            Ok((code, b)) => failures.push(format!(
                "{n}: status {code}: {}",
                String::from_utf8_lossy(&b[..b.len().min(200)])
            )),
            Err(e) => failures.push(format!("{n}: {e}")),
        }
    }
    if admitted == 0 {
        return Err(CliError::Unreachable(format!(
            "no node admitted the request: {}",
            failures.join("; ")
        )));
    }
    let deadline = Instant::now() + Duration::from_millis(wait_ms);
    loop {
        let mut bodies: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
        for n in nodes {
            let url = format!("{}/v1/requests/{client}/{number}", n.trim_end_matches('/'));
            if let Ok((200, b)) = http.send(Method::GET, &url, Vec::new()).await {
                *bodies.entry(b).or_default() += 1;
            }
        }
        let agreed: Vec<(&Vec<u8>, &usize)> =
            bodies.iter().filter(|(_, k)| **k >= quorum).collect();
        if agreed.len() > 1 {
            return Err(CliError::Disagreement(format!(
                "nodes returned {} different results for request {number}",
                bodies.len()
            )));
        }
        if let Some((b, k)) = agreed.first() {
            let r: RequestResult = serde_json::from_slice(b)
                .map_err(|e| CliError::Disagreement(format!("a result does not parse: {e}")))?;
            return Ok(Outcome {
                client,
                number,
                height: r.height,
                reply: r.result,
                agreeing: **k,
            });
        }
        if Instant::now() >= deadline {
            return Err(CliError::Timeout(format!(
                "request {number} of client {client} was admitted by {admitted} node(s) but \
                 {quorum} nodes did not report its result within {wait_ms} ms (it may still \
                 execute; read it back with the same number)"
            )));
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}
