//! Issue 26's check "history and parked runs survive restart byte-identically", at the book's
//! level: a replica restarted from its book's pages in the middle of a run (a handler dropped
//! by the new build, so runs are parked; a failed attempt with its retry pending; the history
//! ring filling) goes on writing the very pages of a replica that never stopped, tick after
//! tick, with equal histories, parked runs and state; none of the parked runs is consumed.
//! (State transfer restores a book from a copy of the same pages: the ledger-level snapshot
//! test is `schedule::handlers::history::history_and_parked_runs_survive_restart_and_state_transfer`.)

use ccron::outbox::{Outbox, OutboxLimits};
use ccron::schedule::{
    HandlerError, Handlers, Limits, NewSchedule, RetryPolicy, RunPolicy, ScheduleRequest,
    Scheduler, Timing,
};
use ccron::{Due, MemPages, PageRange, Principal, Tick};

const C: u32 = 6;

fn range() -> PageRange {
    PageRange::new(0, 32).unwrap()
}

/// A build: "flaky" fails every first attempt (its writes rolled back), "gone" only in the
/// old build.
fn build(with_gone: bool) -> Handlers<u64> {
    let mut h: Handlers<u64> = Handlers::new().with_clone_rollback();
    h.register("flaky", |ctx| {
        *ctx.state += 1;
        if ctx.attempt == 1 {
            return Err(HandlerError::new(1, "flaky"));
        }
        Ok(())
    });
    if with_gone {
        h.register("gone", |ctx| *ctx.state += 100);
    }
    h
}

fn load(pages: &MemPages) -> Scheduler {
    Scheduler::load(C, Limits::default(), pages, range()).unwrap()
}

/// The old build's book: "flaky" every second with retries, "gone" every second and once at
/// 1.5 s; saved.
fn old_build_pages() -> (MemPages, [u64; 3]) {
    let h = build(true);
    let mut book = Scheduler::new(C, Limits::default());
    let every = Timing::Every {
        period_ms: 1_000,
        start_ms: Some(1_000),
    };
    let retry = RunPolicy::default().with_retry(RetryPolicy::exponential(3, 100, 100));
    let mut create = |seq, handler: &str, timing| {
        book.apply(
            &Principal::Host,
            ScheduleRequest::CreateWith {
                schedule: NewSchedule::new(handler, timing),
                policy: retry,
            },
            &h,
            seq,
            Some(0),
        )
        .unwrap()
        .unwrap()
    };
    let ids = [
        create(1, "flaky", every.clone()),
        create(2, "gone", every),
        create(3, "gone", Timing::At(Due::Time(1_500))),
    ];
    let mut pages = MemPages::new(4_096, 32);
    book.save(&mut pages, range()).unwrap();
    (pages, ids)
}

#[test]
fn a_restarted_replica_writes_the_same_pages_with_history_and_parked_runs() {
    let (pages, [flaky, gone, once]) = old_build_pages();
    // The new build drops "gone".
    let mut h = build(false);
    let mut a = load(&pages);
    let mut pa = pages.clone();
    let mut state_a = 0u64;
    let mut outbox = Outbox::new(OutboxLimits::default());
    let ticks = [
        (10, 1_000),
        (11, 1_100),
        (12, 1_600),
        (13, 2_000),
        (14, 2_100),
        (15, 3_000),
        (16, 3_100),
        (17, 4_000),
        (18, 4_100),
    ];
    let (before, after) = ticks.split_at(4);
    for &(seq, now) in before {
        a.on_tick(
            &Tick::new(C, seq, Some(now)),
            &mut state_a,
            &mut h,
            &mut outbox,
        );
        a.save(&mut pa, range()).unwrap();
    }
    // Mid-run: "gone" parked (both schedules), "flaky"'s attempt at 2 s failed and its retry
    // is pending, its history holds the attempts so far.
    assert_eq!(a.parked_count(), 2);
    assert!(a.get(flaky).unwrap().retry.is_some(), "a retry pending");
    assert!(!a.history(flaky).unwrap().is_empty());
    // Restart: replica b loads a's pages (and the application state a snapshot carries).
    let mut b = load(&pa);
    let mut pb = pa.clone();
    let mut state_b = state_a;
    assert!(b == a, "the book reloads as it was");
    assert_eq!(b.history(flaky), a.history(flaky));
    let mut outbox_b = Outbox::new(OutboxLimits::default());
    for &(seq, now) in after {
        let tick = Tick::new(C, seq, Some(now));
        let ra = a.on_tick(&tick, &mut state_a, &mut h, &mut outbox);
        let rb = b.on_tick(&tick, &mut state_b, &mut h, &mut outbox_b);
        assert_eq!(ra, rb, "tick {seq}");
        a.save(&mut pa, range()).unwrap();
        b.save(&mut pb, range()).unwrap();
        assert!(
            pa.snapshot() == pb.snapshot(),
            "identical pages after tick {seq}"
        );
        assert!(a == b, "tick {seq}");
        assert_eq!(state_a, state_b);
        assert_eq!(b.history(flaky), a.history(flaky));
    }
    // Every "flaky" occurrence ran once successfully (after a rolled-back first attempt);
    // the parked runs were never consumed: still in the book, never run, due points kept.
    assert_eq!(state_a, 4, "1, 2, 3 and 4 s, each once");
    assert_eq!(b.parked_count(), 2);
    for (id, due) in [(gone, 1_000), (once, 1_500)] {
        let info = b.get(id).expect("a parked schedule stays in the book");
        assert!(info.parked, "{id}");
        assert_eq!((info.next, info.runs), (Some(Due::Time(due)), 0), "{id}");
    }
    // And a restart now reloads exactly what both replicas hold.
    assert!(load(&pb) == a);
}
