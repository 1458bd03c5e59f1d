//! Client request ordering under reordering: a client with several requests outstanding must
//! not lose one because the network delivered a higher `req_seq` first (exactly-once is kept).

use crate::replica_support;

use replica_support::Harness;
use sim_bft::ledgers::KvOp;
use sim_bft::node::Input;

fn put_payload(key: &str) -> Vec<u8> {
    KvOp::Put {
        key: key.into(),
        value: b"v".to_vec(),
    }
    .to_payload()
}

#[test]
fn a_lower_request_arriving_after_a_higher_one_executes_exactly_once() {
    let mut h = Harness::new(4, |_| {});
    let first = h.request_bytes(0, put_payload("a"));
    let second = h.request_bytes(0, put_payload("b"));
    let send = |h: &mut Harness, bytes: &Vec<u8>| {
        for i in 0..4 {
            h.input(
                i,
                Input::Client {
                    bytes: bytes.clone(),
                },
            );
        }
        h.deliver_all();
    };
    // The network delivers request 2 everywhere, and it commits, before request 1 arrives.
    send(&mut h, &second);
    assert_eq!(h.replies.len(), 4, "request 2 executed at every replica");
    send(&mut h, &first);
    assert_eq!(h.replies.len(), 8, "request 1 was skipped as a duplicate");
    // Exact repeats of either request do not execute again.
    send(&mut h, &first);
    send(&mut h, &second);
    h.advance(100);
    for i in 0..4 {
        assert_eq!(h.replica(i).metrics().get("duplicate_execution_skipped"), 0);
    }
    // Both replies are cached (the client's most recent ones), so both are re-sent.
    assert_eq!(
        h.replies.len(),
        16,
        "each repeat gets its cached reply again"
    );
    assert_eq!(
        h.replies[8..12],
        h.replies[4..8],
        "request 1's reply, unchanged"
    );
    assert_eq!(
        h.replies[12..16],
        h.replies[0..4],
        "request 2's reply, unchanged"
    );
    h.assert_agreement(&[0, 1, 2, 3]);
}
