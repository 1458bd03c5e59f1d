#!/usr/bin/env python3
"""A ccron outbox worker in Python, standard library only.

It speaks the worker protocol of docs/outbox.md ("The worker protocol") and nothing else:

* authenticates every delivery (HMAC-SHA256 over the delivery bytes, the chain, the sender's
  key id, a timestamp within --max-skew-ms of this clock) and refuses anything else with 401;
* deduplicates on (sender, occurrence id) with a digest of handler and payload, in SQLite, in
  the same transaction as the effect: a repeat is answered from memory, the same id with
  another record is 409, a delivery at or below the sender's acknowledged progress 410, one
  beyond the window 503; entries leave only when the sender's progress passes them;
* performs the effect (here: handler "pay", or each handler named by --handler, records the
  payment in the database and answers "paid <payload>"; any other handler is refused with 422);
* signs each answer with ed25519 (ed25519.py): the root of a batch of one, its answer's leaf
  (the protocol's answer bytes hashed), so the ledger believes it when this worker's public
  key is registered for the handler;
* MACs every response to an authenticated delivery (status, body digest, answer signature,
  bound to the request's own MAC), so the dispatcher knows it comes from this worker.

Workers of one service share one database (--db): a record that fails over from one worker
to another after the first performed it is still performed once. SQLite's file locking makes
"check, perform, remember" one transaction across processes.

Run:   python3 worker.py --listen 127.0.0.1:0 --db pay.sqlite --chain-hex 6162 \\
           --sender consumer:<secret hex> --seed-hex <32-byte ed25519 secret hex>
It prints "LISTENING <port> <public key hex>" once it serves.
Other commands: --self-test (RFC 8032 vectors), --public-key, --dump-effects (JSON lines).
"""

import argparse
import hashlib
import hmac
import http.server
import json
import re
import sqlite3
import struct
import sys
import time

import ed25519

DELIVER_PATH = "/ccron/v1/deliver"
HEALTH_PATH = "/ccron/v1/health"
DELIVER_DOMAIN = b"ccron-deliver-v1"
RESPOND_DOMAIN = b"ccron-respond-v1"
ANSWER_DOMAIN = b"ccron-answer-v1\x00"
ROOT_DOMAIN = b"ccron-answers-v1"
ID_TEXT = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{16}-[0-9a-fA-F]{16}$")
KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
MAX_HANDLER_BYTES = 256
U64 = 2**64


def framed(data):
    """A length-prefixed field: u32 big-endian length, then the bytes."""
    return struct.pack(">I", len(data)) + data


def delivery_bytes(chain, key_id, index, id_bytes, handler, attempt, progress, timestamp_ms, payload):
    return (
        DELIVER_DOMAIN
        + framed(chain)
        + framed(key_id.encode())
        + struct.pack(">Q", index)
        + id_bytes
        + framed(handler.encode())
        + struct.pack(">I", attempt)
        + struct.pack(">Q", progress)
        + struct.pack(">Q", timestamp_ms)
        + hashlib.sha256(payload).digest()
    )


def answer_bytes(chain, index, id_bytes, handler, payload, answer):
    return (
        ANSWER_DOMAIN
        + framed(chain)
        + struct.pack(">Q", index)
        + id_bytes
        + framed(handler.encode())
        + hashlib.sha256(payload).digest()
        + hashlib.sha256(answer).digest()
    )


def root_bytes(chain, answer_signing_bytes):
    """What the worker signs: a batch root. This worker signs each answer alone, so the root
    is the answer's leaf, SHA-256(0x00 ‖ answer bytes), and the answer's path is empty."""
    leaf = hashlib.sha256(b"\x00" + answer_signing_bytes).digest()
    return ROOT_DOMAIN + framed(chain) + leaf


def response_bytes(request_tag, status, body, key_hex, sig_hex):
    """What the response MAC covers (this worker sends no path: a batch of one)."""
    out = RESPOND_DOMAIN + request_tag + struct.pack(">H", status) + hashlib.sha256(body).digest()
    if key_hex:
        out += b"\x01" + bytes.fromhex(key_hex) + bytes.fromhex(sig_hex) + struct.pack(">I", 0)
    else:
        out += b"\x00"
    return out


def delivery_digest(handler, payload):
    h = handler.encode()
    return hashlib.sha256(struct.pack(">I", len(h)) + h + payload).digest()


SCHEMA = """
CREATE TABLE IF NOT EXISTS progress (sender TEXT PRIMARY KEY, floor INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS memory (
    sender TEXT NOT NULL, id TEXT NOT NULL, idx INTEGER NOT NULL, digest BLOB NOT NULL,
    too_large INTEGER NOT NULL, body BLOB NOT NULL, key TEXT NOT NULL, sig TEXT NOT NULL,
    PRIMARY KEY (sender, id));
CREATE INDEX IF NOT EXISTS memory_idx ON memory (sender, idx);
CREATE TABLE IF NOT EXISTS effects (
    sender TEXT NOT NULL, id TEXT NOT NULL, handler TEXT NOT NULL, payload BLOB NOT NULL);
"""


def open_db(path):
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    return db


class Refusal(Exception):
    def __init__(self, status, name, why):
        super().__init__(why)
        self.status, self.name, self.why = status, name, why


def effect(db, sender, id_text, handler, payload, handlers=("pay",)):
    """The effect, inside the delivery's transaction: returns the answer or raises Refusal."""
    if handler not in handlers:
        raise Refusal(422, "rejected", "unknown handler " + handler)
    db.execute(
        "INSERT INTO effects (sender, id, handler, payload) VALUES (?, ?, ?, ?)",
        (sender, id_text, handler, payload),
    )
    return b"paid " + payload


class Worker:
    def __init__(self, args):
        self.chain = bytes.fromhex(args.chain_hex)
        self.senders = {}
        for s in args.sender:
            key_id, _, secret = s.partition(":")
            if not KEY_ID.match(key_id) or not 16 <= len(bytes.fromhex(secret)) <= 64:
                raise SystemExit("--sender is KEY_ID:SECRET_HEX (16 to 64 bytes)")
            self.senders[key_id] = bytes.fromhex(secret)
        self.signer = ed25519.Signer(bytes.fromhex(args.seed_hex))
        self.handlers = tuple(args.handler or ["pay"])
        self.db_path = args.db
        self.window = args.window
        self.max_skew_ms = args.max_skew_ms
        self.max_answer_bytes = args.max_answer_bytes
        self.max_body_bytes = args.max_body_bytes
        db = open_db(self.db_path)
        db.executescript(SCHEMA)
        db.close()

    def authenticate(self, h, index, id_bytes, handler, attempt, progress, payload):
        chain = h.get("Ccron-Chain", "")
        if chain.lower() != self.chain.hex():
            raise Refusal(401, "unauthenticated", "another chain")
        key_id = h.get("Ccron-Key-Id", "")
        secret = self.senders.get(key_id)
        if secret is None:
            raise Refusal(401, "unauthenticated", "unknown key id")
        try:
            ts = int(h.get("Ccron-Timestamp", ""))
            tag = bytes.fromhex(h.get("Ccron-Signature", ""))
        except ValueError:
            raise Refusal(401, "unauthenticated", "malformed timestamp or signature")
        if abs(int(time.time() * 1000) - ts) > self.max_skew_ms:
            raise Refusal(401, "unauthenticated", "timestamp outside the skew window")
        msg = delivery_bytes(self.chain, key_id, index, id_bytes, handler, attempt, progress, ts, payload)
        if not hmac.compare_digest(hmac.new(secret, msg, hashlib.sha256).digest(), tag):
            raise Refusal(401, "unauthenticated", "the MAC does not match")
        return key_id, secret, tag

    def deliver(self, h, payload):
        """Returns (status, headers, body), the response MAC included once authenticated."""
        auth = []
        try:
            status, headers, body = self.deliver_inner(h, payload, auth)
        except Refusal as r:
            status, headers, body = r.status, {"Ccron-Error": r.name}, r.why.encode()
        except CommitThenRefuse as c:
            r = c.refusal
            status, headers, body = r.status, {"Ccron-Error": r.name}, r.why.encode()
        if auth:
            secret, tag = auth[0]
            msg = response_bytes(tag, status, body, headers.get("Ccron-Answer-Key"), headers.get("Ccron-Answer-Signature"))
            headers["Ccron-Response-Signature"] = hmac.new(secret, msg, hashlib.sha256).hexdigest()
        return status, headers, body

    def deliver_inner(self, h, payload, auth):
        key = h.get("Idempotency-Key", "")
        # "<chain hex>:<occurrence id>"; a bare id from a dispatcher built before keys named
        # the chain.
        key_chain, _, id_text = key.rpartition(":")
        if not ID_TEXT.match(id_text) or not re.match(r"^([0-9a-fA-F]{2}){0,64}$", key_chain):
            raise Refusal(400, "bad-request", "malformed Idempotency-Key")
        if ":" in key and key_chain.lower() != self.chain.hex():
            raise Refusal(401, "unauthenticated", "another chain")
        id_bytes = bytes.fromhex(id_text.replace("-", ""))
        id_text = id_text.lower()
        handler = h.get("Ccron-Handler", "")
        if not 1 <= len(handler.encode()) <= MAX_HANDLER_BYTES:
            raise Refusal(400, "bad-request", "missing or oversized Ccron-Handler")
        try:
            index = int(h.get("Ccron-Outbox-Index", ""))
            attempt = int(h.get("Ccron-Attempt", ""))
            progress = int(h.get("Ccron-Progress", ""))
        except ValueError:
            raise Refusal(400, "bad-request", "malformed index, attempt or progress")
        if not (0 < index < U64 and 0 <= attempt < 2**32 and 0 <= progress < U64):
            raise Refusal(400, "bad-request", "index, attempt or progress out of range")
        sender, secret, tag = self.authenticate(h, index, id_bytes, handler, attempt, progress, payload)
        auth.append((secret, tag))
        return self.perform_once(sender, index, id_text, id_bytes, handler, payload, progress)

    def perform_once(self, sender, index, id_text, id_bytes, handler, payload, progress):
        digest = delivery_digest(handler, payload)
        db = open_db(self.db_path)
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                result = self.in_transaction(db, sender, index, id_text, id_bytes, handler, payload, progress, digest)
            except (Refusal, CommitThenRefuse):
                # What was written stands: the sender's progress, or an effect remembered as
                # too large. A refusal before the effect wrote nothing else.
                db.execute("COMMIT")
                raise
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result
        finally:
            db.close()

    def in_transaction(self, db, sender, index, id_text, id_bytes, handler, payload, progress, digest):
        row = db.execute("SELECT floor FROM progress WHERE sender = ?", (sender,)).fetchone()
        floor = row[0] if row else 0
        if progress > floor:
            floor = progress
            db.execute(
                "INSERT INTO progress (sender, floor) VALUES (?, ?) "
                "ON CONFLICT (sender) DO UPDATE SET floor = excluded.floor",
                (sender, floor),
            )
            # The sender's acknowledged progress is the only eviction.
            db.execute("DELETE FROM memory WHERE sender = ? AND idx <= ?", (sender, floor))
        seen = db.execute(
            "SELECT idx, digest, too_large, body, key, sig FROM memory WHERE sender = ? AND id = ?",
            (sender, id_text),
        ).fetchone()
        if seen is not None:
            idx, first_digest, too_large, body, key, sig = seen
            if idx != index or bytes(first_digest) != digest:
                raise Refusal(409, "conflict", "this id was delivered with another record")
            if too_large:
                raise Refusal(422, "answer-too-large", "the answer exceeds what the ledger accepts")
            return 200, {"Ccron-Answer-Key": key, "Ccron-Answer-Signature": sig, "Idempotent-Replayed": "true"}, bytes(body)
        if index <= floor:
            raise Refusal(410, "stale", "at or below your acknowledged progress")
        if index > floor + self.window:
            raise Refusal(503, "ahead-of-window", "beyond the window of your progress")
        (count,) = db.execute("SELECT COUNT(*) FROM memory WHERE sender = ?", (sender,)).fetchone()
        if count >= self.window:
            raise Refusal(503, "memory-full", "window full")
        answer = effect(db, sender, id_text, handler, payload, self.handlers)
        if len(answer) > self.max_answer_bytes:
            db.execute(
                "INSERT INTO memory VALUES (?, ?, ?, ?, 1, x'', '', '')",
                (sender, id_text, index, digest),
            )
            # Remembered (committed by the caller) so a repeat is not performed again.
            raise CommitThenRefuse(Refusal(422, "answer-too-large", "the answer exceeds what the ledger accepts"))
        sig = self.signer.sign(root_bytes(self.chain, answer_bytes(self.chain, index, id_bytes, handler, payload, answer))).hex()
        key = self.signer.public.hex()
        db.execute(
            "INSERT INTO memory VALUES (?, ?, ?, ?, 0, ?, ?, ?)",
            (sender, id_text, index, digest, answer, key, sig),
        )
        return 200, {"Ccron-Answer-Key": key, "Ccron-Answer-Signature": sig}, answer


class CommitThenRefuse(Exception):
    """A refusal whose transaction still commits (the effect ran and is remembered)."""

    def __init__(self, refusal):
        super().__init__(refusal.why)
        self.refusal = refusal


def serve(worker, host, port):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 10  # a slow client cannot hold a thread longer (use a proxy in front).

        def log_message(self, fmt, *args):
            pass

        def reply(self, status, headers, body):
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == HEALTH_PATH:
                self.reply(200, {}, b"")
            else:
                self.reply(404, {}, b"")

        def do_POST(self):
            if self.path != DELIVER_PATH:
                self.reply(404, {}, b"")
                return
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                self.close_connection = True
                self.reply(411, {"Ccron-Error": "bad-request"}, b"Content-Length required")
                return
            if int(length) > worker.max_body_bytes:
                self.close_connection = True
                self.reply(413, {"Ccron-Error": "bad-request"}, b"body too large")
                return
            payload = self.rfile.read(int(length))
            status, headers, body = worker.deliver(self.headers, payload)
            self.reply(status, headers, body)

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 64

    httpd = Server((host, port), Handler)
    print("LISTENING", httpd.server_address[1], worker.signer.public.hex(), flush=True)
    httpd.serve_forever()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--db", default="worker.sqlite")
    ap.add_argument("--chain-hex", default="")
    ap.add_argument("--sender", action="append", default=[], help="KEY_ID:SECRET_HEX (repeatable)")
    ap.add_argument("--seed-hex", help="the worker's 32-byte ed25519 secret, hex")
    ap.add_argument("--handler", action="append", default=[], help="a handler this worker performs (repeatable; default: pay)")
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--max-skew-ms", type=int, default=30_000)
    ap.add_argument("--max-answer-bytes", type=int, default=65_536)
    ap.add_argument("--max-body-bytes", type=int, default=1 << 20)
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--public-key", action="store_true")
    ap.add_argument("--dump-effects", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        ed25519.self_test()
        print("ok")
        return
    if args.public_key:
        print(ed25519.public_key(bytes.fromhex(args.seed_hex)).hex())
        return
    if args.dump_effects:
        db = open_db(args.db)
        for sender, id_text, handler, payload in db.execute("SELECT sender, id, handler, payload FROM effects"):
            print(json.dumps({"sender": sender, "id": id_text, "handler": handler, "payload": bytes(payload).hex()}))
        return
    if not args.seed_hex or not args.sender:
        sys.exit("--seed-hex and at least one --sender are required")
    host, _, port = args.listen.rpartition(":")
    serve(Worker(args), host, int(port))


if __name__ == "__main__":
    main()
