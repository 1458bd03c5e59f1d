//! The HTTP contract between the dispatcher and a worker (`docs/outbox.md`, "The worker
//! protocol", which specifies it for workers in any language).
//!
//! * `POST /ccron/v1/deliver`, body = the record's payload (`application/octet-stream`), headers
//!   [`IDEMPOTENCY_KEY`] (the chain and the occurrence id, [`idempotency_key`]), [`HANDLER`],
//!   [`OUTBOX_INDEX`], [`ATTEMPT`], [`PROGRESS`] (the consumer's acknowledged progress), and the
//!   authentication: [`CHAIN`], [`KEY_ID`], [`TIMESTAMP`], [`SIGNATURE`] (HMAC-SHA256 over
//!   [`crate::auth::delivery_signing_bytes`]).
//! * `200`: done; the body is the answer that goes back into the ledger (at most what the
//!   ledger accepts), signed in [`ANSWER_KEY`], [`ANSWER_SIGNATURE`] and [`ANSWER_PATH`]. A
//!   repeat of a delivery already performed answers the same, with [`REPLAYED`]`: true`.
//! * `401` (not authenticated), `408`, `429`, `5xx`, a timeout or a connection error: not done
//!   now; the worker's health suffers and the record is retried, on another worker when one is
//!   up.
//! * any other `4xx` (`400` malformed, `409` the same id delivered before with another record,
//!   `410` at or below the sender's acknowledged progress, `413` too large, `422` rejected or
//!   its answer larger than the ledger accepts): the worker refuses this record for good; it is
//!   dead-lettered at once.
//! * [`RESPONSE_SIGNATURE`]: every response to an authenticated delivery is MACed
//!   ([`crate::auth::response_signing_bytes`]); a success or a refusal for good without it is a
//!   worker fault, never believed.
//! * [`ERROR`]: a typed name for every refusal (see [`crate::worker::Refusal`] and
//!   [`crate::server::REFUSAL_HEADER`] for the server's own).
//! * `GET /ccron/v1/health`: `2xx` when the worker takes deliveries (the probe).
//!
//! A replica's read endpoint ([`crate::read`]): `GET /ccron/v1/outbox?from=I&limit=N&max_bytes=B`
//! answers `200` with a [`ccron::outbox::ReadPage`] (`application/octet-stream`), `400` for a
//! malformed query, `503` while the replica has nothing to serve.

/// Path of a delivery.
pub const DELIVER_PATH: &str = "/ccron/v1/deliver";
/// Path of a replica's outbox read endpoint.
pub const OUTBOX_PATH: &str = "/ccron/v1/outbox";
/// Path of the health probe.
pub const HEALTH_PATH: &str = "/ccron/v1/health";
/// Header carrying the idempotency key: the chain id (lowercase hex), `:`, the occurrence id
/// ([`idempotency_key`]).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Header carrying the record's handler.
pub const HANDLER: &str = "ccron-handler";
/// Header carrying the record's outbox index.
pub const OUTBOX_INDEX: &str = "ccron-outbox-index";
/// Header carrying the attempt number (from 1).
pub const ATTEMPT: &str = "ccron-attempt";
/// Header carrying the sender's acknowledged progress (decimal): every record up to it is
/// finished for good; the worker forgets them and refuses them (410).
pub const PROGRESS: &str = "ccron-progress";
/// Header carrying the chain id (lowercase hex).
pub const CHAIN: &str = "ccron-chain";
/// Header carrying the sender's key id.
pub const KEY_ID: &str = "ccron-key-id";
/// Header carrying the sender's clock (decimal milliseconds since the Unix epoch).
pub const TIMESTAMP: &str = "ccron-timestamp";
/// Header carrying the delivery's HMAC-SHA256 (64 lowercase hex digits).
pub const SIGNATURE: &str = "ccron-signature";
/// Response header: the worker's answer key (64 hex digits).
pub const ANSWER_KEY: &str = "ccron-answer-key";
/// Response header: the worker's ed25519 signature over its batch's root (128 hex digits).
pub const ANSWER_SIGNATURE: &str = "ccron-answer-signature";
/// Response header: the answer's Merkle path to the signed root, comma-separated steps `l<64
/// hex>` (the sibling is on the left) or `r<64 hex>`; absent for a batch of one.
pub const ANSWER_PATH: &str = "ccron-answer-path";
/// Response header: HMAC-SHA256 of the response (see
/// [`crate::auth::response_signing_bytes`]) under the sender's secret, 64 hex digits; on every
/// response to an authenticated delivery.
pub const RESPONSE_SIGNATURE: &str = "ccron-response-signature";
/// Response header of a repeat answered from the worker's memory.
pub const REPLAYED: &str = "idempotent-replayed";
/// Response header naming a worker's refusal.
pub const ERROR: &str = "ccron-error";
/// Longest handler name a worker accepts.
pub const MAX_HANDLER_BYTES: usize = 256;
/// Longest chain id (bytes).
pub const MAX_CHAIN_ID_BYTES: usize = 64;

/// The idempotency key of occurrence `id` of chain `chain_id`: the chain id in lowercase hex,
/// `:`, the occurrence id's 42-character text form. It names the chain, so two chains' records
/// with the same occurrence id never share a key (in a worker's memory or in any service the
/// worker passes the key on to).
pub fn idempotency_key(chain_id: &[u8], id: &ccron::outbox::OccurrenceId) -> String {
    format!("{}:{id}", ccron::outbox::workers::to_hex(chain_id))
}

/// Parses an [`IDEMPOTENCY_KEY`] value: the chain part (hex, as sent) and the occurrence id. A
/// bare occurrence id (a dispatcher built before keys named the chain) has no chain part.
/// `None` when malformed (a chain part over [`MAX_CHAIN_ID_BYTES`] or not hex, a bad id).
pub fn parse_idempotency_key(text: &str) -> Option<(Option<&str>, ccron::outbox::OccurrenceId)> {
    match text.split_once(':') {
        Some((chain, id)) => {
            let ok = chain.len() <= 2 * MAX_CHAIN_ID_BYTES
                && chain.len().is_multiple_of(2)
                && chain.bytes().all(|b| b.is_ascii_hexdigit());
            ok.then_some(())?;
            Some((Some(chain), id.parse().ok()?))
        }
        None => Some((None, text.parse().ok()?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccron::outbox::OccurrenceId;

    #[test]
    fn idempotency_keys_name_the_chain() {
        let id = OccurrenceId::new(1, 2, 3);
        let a = idempotency_key(b"chain-a", &id);
        let b = idempotency_key(b"chain-b", &id);
        assert_ne!(a, b, "one occurrence id, two chains, two keys");
        assert_eq!(a, format!("636861696e2d61:{id}"));
        assert_eq!(
            parse_idempotency_key(&a),
            Some((Some("636861696e2d61"), id))
        );
        assert_eq!(parse_idempotency_key(&id.to_string()), Some((None, id)));
        assert_eq!(parse_idempotency_key(&format!("zz:{id}")), None);
        assert_eq!(parse_idempotency_key(&format!("abc:{id}")), None);
        let long = "ab".repeat(MAX_CHAIN_ID_BYTES + 1);
        assert_eq!(parse_idempotency_key(&format!("{long}:{id}")), None);
        assert_eq!(parse_idempotency_key("636861696e2d61:nope"), None);
    }
}
