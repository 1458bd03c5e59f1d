//! One delivery attempt and one health probe: the request (with its MAC when the worker has a
//! secret), its deadline, and the reading of the response per the worker contract (moved out
//! of `deliver.rs` unchanged).

use super::*;

impl Dispatcher {
    pub(super) fn spawn_attempt(&mut self, w: WorkerId, d: &Delivery, progress: u64) {
        let (Some(base), Some(endpoint)) =
            (self.deliver_uris.get(w).cloned(), self.cfg.workers.get(w))
        else {
            return;
        };
        self.stats.attempts += 1;
        let policy = *self.cfg.pool.policy(&d.record.handler);
        let timeout = Duration::from_millis(u64::try_from(policy.attempt_timeout_ms).unwrap_or(1));
        let payload_sha256 = sha256(&d.record.payload);
        let mut builder = Request::post(base)
            .header(
                contract::IDEMPOTENCY_KEY,
                contract::idempotency_key(&self.cfg.chain_id, &d.record.id),
            )
            .header(contract::HANDLER, d.record.handler.as_str())
            .header(contract::OUTBOX_INDEX, d.index)
            .header(contract::ATTEMPT, d.attempt)
            .header(contract::PROGRESS, progress)
            .header("content-type", "application/octet-stream");
        let mut response_key = None;
        if let Some(secret) = &endpoint.secret {
            let timestamp_ms = (self.unix_clock)();
            let claims = DeliveryClaims {
                chain_id: &self.cfg.chain_id,
                key_id: &self.cfg.key_id,
                index: d.index,
                id: d.record.id,
                handler: &d.record.handler,
                attempt: d.attempt,
                progress,
                timestamp_ms,
                payload_sha256,
            };
            let tag = auth::mac(secret, &auth::delivery_signing_bytes(&claims));
            response_key = Some((secret.clone(), tag));
            builder = builder
                .header(contract::CHAIN, self.chain_hex.clone())
                .header(contract::KEY_ID, self.cfg.key_id.as_str())
                .header(contract::TIMESTAMP, timestamp_ms)
                .header(contract::SIGNATURE, to_hex(&tag));
        }
        let request = builder.body(Full::new(Bytes::from(d.record.payload.clone())));
        let check = AnswerCheck {
            chain_id: self.chain_id.clone(),
            index: d.index,
            record: d.record.clone(),
            required: endpoint.secret.is_some() || endpoint.answer_key.is_some(),
            keys: self.answer_keys.clone(),
            verified: self.verified.clone(),
            max_answer_bytes: self.cfg.max_answer_bytes,
            verification: self.cfg.verify_answers,
            worker: w,
            response_key,
        };
        let client = self.client.clone();
        let tx = self.tx.clone();
        let (index, attempt) = (d.index, d.attempt);
        let span = tracing::info_span!("delivery", id = %d.record.id, index, attempt, worker = w);
        self.tasks.spawn(
            async move {
                let reply = match request {
                    Err(e) => Reply::plain(
                        AttemptOutcome::Rejected(format!("bad request: {e}")),
                        AttemptKind::BadRequest,
                    ),
                    Ok(req) => {
                        match tokio::time::timeout(timeout, post(&client, req, &check)).await {
                            Err(_) => Reply::plain(AttemptOutcome::Timeout, AttemptKind::Timeout),
                            Ok(r) => r,
                        }
                    }
                };
                tracing::debug!(outcome = %reply.outcome, "attempt finished");
                let _ = tx
                    .send(Event::Attempt {
                        index,
                        attempt,
                        worker: w,
                        reply,
                    })
                    .await;
            }
            .instrument(span),
        );
    }

    pub(super) fn spawn_probe(&mut self, w: WorkerId) {
        let Some(uri) = self.health_uris.get(w).cloned() else {
            return;
        };
        self.stats.probes += 1;
        let client = self.probe_client.clone();
        let tx = self.tx.clone();
        let timeout = Duration::from_millis(
            u64::try_from(self.cfg.pool.health.probe_timeout_ms).unwrap_or(1),
        );
        self.tasks.spawn(async move {
            let ok = match Request::get(uri).body(Empty::new()) {
                Ok(req) => matches!(
                    tokio::time::timeout(timeout, client.request(req)).await,
                    Ok(Ok(resp)) if resp.status().is_success()
                ),
                Err(_) => false,
            };
            tracing::debug!(worker = w, ok, "probe finished");
            let _ = tx.send(Event::Probe { worker: w, ok }).await;
        });
    }
}

/// Sends one delivery and classifies the response per the contract.
async fn post(
    client: &Client<HttpConnector, Full<Bytes>>,
    req: Request<Full<Bytes>>,
    check: &AnswerCheck,
) -> Reply {
    let resp = match client.request(req).await {
        Ok(r) => r,
        Err(e) => {
            return Reply::plain(
                AttemptOutcome::Transport(e.to_string()),
                AttemptKind::Transport,
            );
        }
    };
    let status = resp.status();
    let headers = resp.headers().clone();
    let kind = AttemptKind::of_response(status, &headers);
    let retry_after_ms = (!status.is_success())
        .then(|| outcomes::retry_after_ms(&headers))
        .flatten();
    let replayed = headers.contains_key(contract::REPLAYED);
    let refusal = headers
        .get(contract::ERROR)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = match Limited::new(resp.into_body(), check.max_answer_bytes)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes().to_vec(),
        Err(e) if status.is_success() && e.is::<http_body_util::LengthLimitError>() => {
            return Reply {
                note: Some(Note::AnswerTooLarge),
                ..Reply::plain(
                    AttemptOutcome::Rejected(format!(
                        "answer longer than the ledger accepts ({} bytes)",
                        check.max_answer_bytes
                    )),
                    AttemptKind::AnswerTooLarge,
                )
            };
        }
        Err(e) => {
            return Reply::plain(
                AttemptOutcome::Transport(format!("answer not read: {e}")),
                AttemptKind::Transport,
            );
        }
    };
    let bad = |why: String| {
        tracing::warn!(%why, %status, "response refused");
        Reply {
            note: Some(Note::BadAnswer),
            ..Reply::plain(AttemptOutcome::Failed(why), AttemptKind::BadAnswer)
        }
    };
    let proof = if status.is_success() {
        match check.parse_proof(&headers) {
            Ok(p) => p,
            Err(why) => return bad(why),
        }
    } else {
        None
    };
    // A success or a refusal for good must come from the worker the request went to (a
    // forged one would be acknowledged, or dead-lettered, for nothing); a "not now" needs no
    // proof: it is retried anyway (and the bounded server's own refusals carry none).
    let final_status = status.is_success()
        || (status.is_client_error()
            && !matches!(
                status,
                StatusCode::UNAUTHORIZED
                    | StatusCode::REQUEST_TIMEOUT
                    | StatusCode::TOO_MANY_REQUESTS
            ));
    if final_status && !check.response_is_authentic(&headers, status, &body, proof.as_ref()) {
        return bad(format!("a {status} response without a valid response MAC"));
    }
    let outcome = match (classify(status, body), kind, retry_after_ms) {
        // The bounded server's rate limit, with its wait: a pause, not a fault.
        (AttemptOutcome::Failed(why), AttemptKind::RateLimited, Some(_)) => {
            AttemptOutcome::Throttled(why)
        }
        (o, _, _) => o,
    };
    let note = match (status, refusal.as_deref()) {
        (StatusCode::UNAUTHORIZED, _) => Some(Note::Unauthorized),
        (_, Some("answer-too-large")) => Some(Note::AnswerTooLarge),
        _ => None,
    };
    let AttemptOutcome::Done(body) = outcome else {
        return Reply {
            note,
            retry_after_ms,
            ..Reply::plain(outcome, kind)
        };
    };
    if let Some(p) = &proof
        && let Err(why) = check.check_proof(p, &body)
    {
        return bad(why);
    }
    Reply {
        outcome: AttemptOutcome::Done(body),
        kind,
        retry_after_ms: None,
        replayed,
        proof,
        note,
    }
}

/// The contract's reading of a response: 2xx done; 401, 408, 429, 5xx (and anything else that
/// is not a 4xx) failed for now; any other 4xx rejected for good.
pub(super) fn classify(status: StatusCode, body: Vec<u8>) -> AttemptOutcome {
    if status.is_success() {
        AttemptOutcome::Done(body)
    } else if status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::UNAUTHORIZED
        || !status.is_client_error()
    {
        AttemptOutcome::Failed(status.to_string())
    } else {
        let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
        AttemptOutcome::Rejected(format!("{status}: {text}"))
    }
}
