//! Checking a worker's answer before it is handed back ([`AnswerVerification`]): the answer
//! key's signature over the batch root and the path from the answer to it, once per verified
//! root ([`VerifiedRoots`]), and the response MAC of an authenticated worker.

use super::*;

/// What an answer must satisfy to be handed back.
pub(super) struct AnswerCheck {
    pub(super) chain_id: Arc<[u8]>,
    pub(super) index: u64,
    pub(super) record: OutboxRecord,
    /// A signature is required (authenticated workers, or an expected key).
    pub(super) required: bool,
    /// The pool's answer keys (empty: any key).
    pub(super) keys: Arc<[WorkerKey]>,
    pub(super) max_answer_bytes: usize,
    /// Roots whose signature was verified already (shared by the attempts).
    pub(super) verified: Arc<VerifiedRoots>,
    /// Which answers' signatures to verify here.
    pub(super) verification: AnswerVerification,
    /// The worker the request goes to.
    pub(super) worker: WorkerId,
    /// The secret the request was MACed with and its MAC: the response's MAC key.
    pub(super) response_key: Option<(DeliverySecret, [u8; 32])>,
}

/// Which answers' ed25519 signatures the dispatcher verifies itself. The ledger verifies every
/// answer; the dispatcher's check catches a worker that signs wrongly (a bad key, a broken
/// implementation) before its answers are acknowledged, and marks it faulty. Every response of
/// an authenticated worker carries a MAC the dispatcher always checks, so nobody else can
/// change an answer, its signature or its status on the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerVerification {
    /// Every signed root (one verification per batch of answers signed together).
    Every,
    /// The first `first` roots of each worker since the dispatcher started, then one root in
    /// `one_in`, picked by the signature (uniform; the same pick for every answer of a batch).
    Sampled {
        /// Roots verified first, per worker.
        first: u32,
        /// Then one root in this many (at least 1).
        one_in: u32,
    },
}

impl Default for AnswerVerification {
    /// The first 16 roots of each worker, then one in 16.
    fn default() -> Self {
        Self::Sampled {
            first: 16,
            one_in: 16,
        }
    }
}

/// The batch roots whose signature the dispatcher verified: the answers of one batch share one
/// signature, so it is verified once. Bounded (oldest forgotten first).
#[derive(Debug, Default)]
pub struct VerifiedRoots {
    pub(super) inner: std::sync::Mutex<RootMemory>,
    pub(super) checks: std::sync::atomic::AtomicU64,
    /// The pool's answer keys, decoded once.
    pub(super) keys: BTreeMap<WorkerKey, PreparedKey>,
    /// Roots verified per worker.
    pub(super) per_worker: Vec<std::sync::atomic::AtomicU64>,
}

/// The verified roots' names, and their order for forgetting the oldest.
type RootMemory = (
    std::collections::HashSet<[u8; 32]>,
    std::collections::VecDeque<[u8; 32]>,
);

/// Verified roots remembered.
const VERIFIED_ROOTS: usize = 1_024;

impl VerifiedRoots {
    /// A digest naming (key, chain, root, signature).
    pub(super) fn name(
        key: &WorkerKey,
        chain_id: &[u8],
        root: &[u8; 32],
        sig: &[u8; 64],
    ) -> [u8; 32] {
        let mut bytes = Vec::with_capacity(32 + chain_id.len() + 32 + 64);
        bytes.extend_from_slice(&key.0);
        bytes.extend_from_slice(&(chain_id.len() as u64).to_be_bytes());
        bytes.extend_from_slice(chain_id);
        bytes.extend_from_slice(root);
        bytes.extend_from_slice(sig);
        sha256(&bytes)
    }

    /// Whether `policy` has worker `w`'s answer signed with `sig` verified here (the sample is
    /// picked by the signature's `S` half: uniform, and the same for every answer of a batch).
    pub(super) fn should_verify(
        &self,
        policy: AnswerVerification,
        w: WorkerId,
        sig: &[u8; 64],
    ) -> bool {
        match policy {
            AnswerVerification::Every => true,
            AnswerVerification::Sampled { first, one_in } => {
                let done = self
                    .per_worker
                    .get(w)
                    .map_or(0, |c| c.load(std::sync::atomic::Ordering::Relaxed));
                let pick = u32::from_be_bytes([sig[32], sig[33], sig[34], sig[35]]);
                done < u64::from(first) || pick.is_multiple_of(one_in.max(1))
            }
        }
    }

    /// Whether `sig` by `key` over `root` verifies, from memory when it did before; a
    /// verification made counts for worker `w`.
    pub(super) fn check(
        &self,
        w: WorkerId,
        key: &WorkerKey,
        chain_id: &[u8],
        root: &[u8; 32],
        sig: &[u8; 64],
    ) -> bool {
        let name = Self::name(key, chain_id, root, sig);
        let lock = || self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if lock().0.contains(&name) {
            return true;
        }
        self.checks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ok = match self.keys.get(key) {
            Some(k) => k.verify_root(chain_id, root, sig),
            None => PreparedKey::new(key).is_some_and(|k| k.verify_root(chain_id, root, sig)),
        };
        if !ok {
            return false;
        }
        if let Some(c) = self.per_worker.get(w) {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let mut g = lock();
        if g.0.insert(name) {
            g.1.push_back(name);
            while g.1.len() > VERIFIED_ROOTS {
                if let Some(old) = g.1.pop_front() {
                    g.0.remove(&old);
                }
            }
        }
        true
    }
}

/// Parses [`contract::ANSWER_PATH`] (absent or empty: no steps; at most
/// [`MAX_PROOF_STEPS`]).
///
/// # Errors
/// A step without its side or 64 hex digits, or too many steps.
pub fn parse_answer_path(text: Option<&str>) -> Result<Vec<PathStep>, String> {
    let Some(text) = text.filter(|t| !t.is_empty()) else {
        return Ok(Vec::new());
    };
    let steps: Vec<&str> = text.split(',').collect();
    if steps.len() > MAX_PROOF_STEPS {
        return Err(format!("answer path of {} steps", steps.len()));
    }
    steps
        .into_iter()
        .map(|s| {
            let left = match s.as_bytes().first() {
                Some(b'l') => true,
                Some(b'r') => false,
                _ => return Err("answer path step without a side".to_string()),
            };
            let hash = hex_array::<32>(s.get(1..).unwrap_or_default())
                .map_err(|e| format!("answer path: {e}"))?;
            Ok(PathStep { left, hash })
        })
        .collect()
}

impl AnswerCheck {
    /// The proof in `headers`, parsed: `Ok(None)` for an unsigned answer where none is
    /// required.
    pub(super) fn parse_proof(
        &self,
        headers: &hyper::HeaderMap,
    ) -> Result<Option<AnswerProof>, String> {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let (key, sig) = match (text(contract::ANSWER_KEY), text(contract::ANSWER_SIGNATURE)) {
            (None, None) if !self.required => return Ok(None),
            (Some(k), Some(s)) => (k, s),
            _ => return Err("answer without a worker signature".into()),
        };
        Ok(Some(AnswerProof {
            key: key
                .parse::<WorkerKey>()
                .map_err(|e| format!("answer key: {e}"))?,
            signature: hex_array::<64>(sig).map_err(|e| format!("answer signature: {e}"))?,
            path: parse_answer_path(text(contract::ANSWER_PATH))?,
        }))
    }

    /// Whether the response carries a valid MAC by the worker this request was sent to
    /// (always true for an unauthenticated worker).
    pub(super) fn response_is_authentic(
        &self,
        headers: &hyper::HeaderMap,
        status: StatusCode,
        body: &[u8],
        proof: Option<&AnswerProof>,
    ) -> bool {
        let Some((secret, request_tag)) = &self.response_key else {
            return true;
        };
        let Some(mac) = headers
            .get(contract::RESPONSE_SIGNATURE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| hex_array::<32>(v).ok())
        else {
            return false;
        };
        auth::verify_mac(
            secret,
            &auth::response_signing_bytes(request_tag, status.as_u16(), body, proof),
            &mac,
        )
    }

    /// Checks an answer's proof: one of the pool's keys, a path that is not too long, and,
    /// when [`DispatcherConfig::verify_answers`] picks it, the signature itself.
    pub(super) fn check_proof(&self, proof: &AnswerProof, body: &[u8]) -> Result<(), String> {
        if !self.keys.is_empty() && !self.keys.contains(&proof.key) {
            return Err(format!(
                "answer signed by {}, none of the pool's keys",
                proof.key
            ));
        }
        if proof.path.len() > MAX_PROOF_STEPS {
            return Err("answer path too long".into());
        }
        if !self
            .verified
            .should_verify(self.verification, self.worker, &proof.signature)
        {
            return Ok(());
        }
        let root = answer_root(proof, &self.chain_id, self.index, &self.record, body)
            .ok_or("answer path too long")?;
        if !self.verified.check(
            self.worker,
            &proof.key,
            &self.chain_id,
            &root,
            &proof.signature,
        ) {
            return Err("the answer's signature does not verify".into());
        }
        Ok(())
    }
}
