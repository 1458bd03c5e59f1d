//! Admission capacity per time slot (`Limits::slot_capacity`): a hostile client filling a slot
//! is refused with a typed, counted `SlotFull` that changes nothing, and every other client's
//! admission in other slots is unchanged.

use ccron::schedule::{
    Handlers, Limits, NewSchedule, ScheduleError, ScheduleRequest, Scheduler, SlotCapacity, Target,
    Timing,
};
use ccron::{Due, PageRange, Principal};

fn handlers() -> Handlers<u64> {
    let mut h = Handlers::new();
    h.register("h", |ctx| *ctx.state += 1);
    h
}

fn book() -> Scheduler {
    let limits = Limits {
        slot_capacity: Some(SlotCapacity {
            slot_ms: 60_000,
            max_due: 3,
        }),
        ..Limits::default()
    };
    Scheduler::new_in(1, limits, PageRange::new(0, 64).unwrap())
}

fn at(t: i64) -> ScheduleRequest {
    ScheduleRequest::Create(NewSchedule::new("h", Timing::At(Due::Time(t))))
}

/// The honest clients' requests: one schedule each in slots 0, 2, 3 and 4 (minutes), the
/// replies they get.
fn honest(book: &mut Scheduler, h: &Handlers<u64>) -> Vec<Result<Option<u64>, ScheduleError>> {
    (0..4)
        .map(|i| {
            let minute = [0, 2, 3, 4][i];
            book.apply(
                &Principal::Client(ccron::ClientId::from_index(10 + i as u64)),
                at(minute * 60_000 + 5),
                h,
                1,
                Some(0),
            )
            .map(|id| id.map(|_| minute as u64))
        })
        .collect()
}

#[test]
fn a_client_filling_a_slot_is_refused_and_others_are_unchanged() {
    let h = handlers();
    // Without the hostile client.
    let mut quiet = book();
    let baseline = honest(&mut quiet, &h);
    assert!(baseline.iter().all(|r| r.is_ok()));
    // The hostile client floods slot 1 (60 s to 120 s): three fit, the rest are refused.
    let mut b = book();
    let hostile = Principal::Client(ccron::ClientId::from_index(666));
    for i in 0..3 {
        b.apply(&hostile, at(60_000 + i), &h, 1, Some(0)).unwrap();
    }
    for i in 3..50 {
        let before = b.clone();
        assert_eq!(
            b.apply(&hostile, at(60_000 + i), &h, 1, Some(0)),
            Err(ScheduleError::SlotFull {
                slot_start_ms: 60_000,
                slot_ms: 60_000,
                held: 3
            })
        );
        assert!(b.eq_but_refusals(&before), "a refusal changes nothing");
    }
    assert_eq!(b.slot_refusals(), 47);
    // Others' admission in other slots is what it is without the flood.
    assert_eq!(honest(&mut b, &h), baseline);
    // A replace moving a schedule into the full slot is refused too; its own entry does not
    // count against it when it stays in its slot.
    let mine = 1;
    let moved = ScheduleRequest::Replace {
        target: Target::Id(mine),
        schedule: NewSchedule::new("h", Timing::At(Due::Time(60_500))),
    };
    assert!(matches!(
        b.apply(&hostile, moved, &h, 1, Some(0)),
        Ok(Some(1))
    ));
    let elsewhere = b
        .apply(
            &Principal::Client(ccron::ClientId::from_index(10)),
            at(5),
            &h,
            1,
            Some(0),
        )
        .unwrap()
        .unwrap();
    let into_full = ScheduleRequest::Replace {
        target: Target::Id(elsewhere),
        schedule: NewSchedule::new("h", Timing::At(Due::Time(61_000))),
    };
    assert!(matches!(
        b.apply(
            &Principal::Client(ccron::ClientId::from_index(10)),
            into_full,
            &h,
            1,
            Some(0)
        ),
        Err(ScheduleError::SlotFull { .. })
    ));
    b.check_invariants().unwrap();
}
