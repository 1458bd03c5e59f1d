//! A small HTTP/1.1 client for the CLI: one GET or POST under a deadline, the answer body
//! read up to a byte bound.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Method, Request, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Largest answer body read (results and refusals are small).
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The client.
#[derive(Clone)]
pub struct Http {
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Http {
    /// A client whose every exchange takes at most `timeout_ms`. Call inside a tokio runtime.
    pub fn new(timeout_ms: u64) -> Self {
        let mut c = HttpConnector::new();
        c.set_connect_timeout(Some(Duration::from_millis(timeout_ms)));
        c.set_nodelay(true);
        Self {
            client: Client::builder(TokioExecutor::new()).build(c),
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    /// Sends one request; returns (status, body). Errors are messages naming the cause.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        body: Vec<u8>,
    ) -> Result<(u16, Vec<u8>), String> {
        let uri: Uri = url.parse().map_err(|e| format!("bad URL {url}: {e}"))?;
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header("content-type", "application/octet-stream")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let exchange = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| format!("transport: {e}"))?;
            let status = resp.status().as_u16();
            let body = Limited::new(resp.into_body(), MAX_BODY_BYTES)
                .collect()
                .await
                .map_err(|e| format!("reading the answer: {e}"))?
                .to_bytes();
            Ok((status, body.to_vec()))
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {} ms", self.timeout.as_millis())))
    }
}
