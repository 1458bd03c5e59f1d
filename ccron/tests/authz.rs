//! Authorization (issue 10): who may trim the outbox and change the schedule book. Every denied
//! request is a typed error and changes nothing (compared through the encoded state).

use ccron::outbox::{OccurrenceId, Outbox, OutboxError, OutboxLimits, OutboxRecord};
use ccron::{Policy, Principal};

const CONSUMER: u64 = 7;

fn outbox_with(n: u64) -> Outbox {
    let mut o = Outbox::new(OutboxLimits::default());
    for i in 0..n {
        o.append(OutboxRecord::new(
            OccurrenceId::new(1, 1, i),
            "mail",
            vec![1; 3],
        ))
        .unwrap();
    }
    o
}

#[test]
fn outbox_progress_only_from_the_consumer_and_never_past_the_head() {
    let policy = Policy::default().with_outbox_consumer(CONSUMER);
    let mut o = outbox_with(5);
    let before = o.encode().unwrap();
    // A stranger, an admin that is not the consumer, and the consumer past the head: rejected,
    // nothing trimmed.
    let stranger = Principal::Client(1);
    assert_eq!(
        o.accept_progress(&policy, &stranger, 3),
        Err(OutboxError::Unauthorized { by: stranger })
    );
    let admin_policy = policy.clone().with_admin(1);
    assert_eq!(
        o.accept_progress(&admin_policy, &stranger, 3),
        Err(OutboxError::Unauthorized { by: stranger })
    );
    let consumer = Principal::Client(CONSUMER);
    for upto in [6, 1_000, u64::MAX] {
        assert_eq!(
            o.accept_progress(&policy, &consumer, upto),
            Err(OutboxError::ProgressAboveHead { upto, head: 5 })
        );
    }
    // Without a configured consumer no client may report.
    assert_eq!(
        o.accept_progress(&Policy::default(), &consumer, 1),
        Err(OutboxError::Unauthorized { by: consumer })
    );
    assert_eq!(o.encode().unwrap(), before);
    assert_eq!((o.first_index(), o.len()), (1, 5));

    // The consumer within the head trims; repeating or going back trims nothing.
    assert_eq!(o.accept_progress(&policy, &consumer, 3), Ok(3));
    assert_eq!((o.first_index(), o.len()), (4, 2));
    assert_eq!(o.accept_progress(&policy, &consumer, 2), Ok(0));
    assert_eq!(o.accept_progress(&policy, &consumer, 5), Ok(2));
    assert_eq!((o.first_index(), o.len()), (6, 0));
    // The host (set-up, tests) is always allowed, still bounded by the head.
    let mut h = outbox_with(2);
    assert_eq!(
        h.accept_progress(&Policy::default(), &Principal::Host, 1),
        Ok(1)
    );
    assert_eq!(
        h.accept_progress(&Policy::default(), &Principal::Host, 3),
        Err(OutboxError::ProgressAboveHead { upto: 3, head: 2 })
    );
}
