//! Nodes' schedule read endpoints over loopback, and the quorum reader: an answer is believed
//! only when f+1 nodes return it identically at the same height, so a lying node (altered
//! schedules, a forged height) is outvoted, a silent one costs a timeout, and a set of nodes
//! that does not agree is a typed error.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use ccron::schedule::query::{QueryAnswer, QueryBody, ScheduleFilter};
use ccron::schedule::{
    Handlers, Limits, NewSchedule, Principal, ScheduleRequest, Scheduler, Target, Timing,
};
use ccron_http::schedules::Unanswerable;
use ccron_http::{
    PublishedBook, ScheduleQuery, ScheduleReadConfig, ScheduleReadError, ScheduleReader,
    ScheduleSource, schedule_router,
};
use tokio::net::TcpListener;

fn book(n: u64) -> Scheduler {
    let mut h: Handlers<u64> = Handlers::new();
    assert!(h.register("pay", |ctx| *ctx.state += 1));
    let mut b = Scheduler::new(1, Limits::default());
    for i in 0..n {
        let s = NewSchedule::new(
            "pay",
            Timing::Every {
                period_ms: 1_000 * (i as i64 + 1),
                start_ms: Some(0),
            },
        )
        .with_key(format!("order-{i}"));
        b.apply(
            &Principal::Client(ccron::ClientId::from_index(i)),
            ScheduleRequest::Create(s),
            &h,
            1,
            Some(10),
        )
        .unwrap();
    }
    b
}

/// A node that answers its honest answer with the schedules' owners and next due points
/// altered, and claims a later height.
struct Liar(PublishedBook);

impl ScheduleSource for Liar {
    fn answer(&self, q: &ScheduleQuery) -> Result<QueryAnswer, Unanswerable> {
        let mut a = self.0.answer(q)?;
        a.at_height += 50;
        match &mut a.body {
            QueryBody::List(l) => {
                for s in &mut l.items {
                    s.owner = Principal::Client(ccron::ClientId::from_index(666));
                    s.paused = true;
                }
            }
            QueryBody::Describe(d) => *d = None,
            _ => {}
        }
        Ok(a)
    }
}

async fn serve(router: Router) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(ccron_http::serve(
        l,
        router,
        ccron_http::ServerConfig::default(),
        std::future::pending(),
    ));
    addr
}

fn published(replica: u64, b: &Scheduler, height: u64) -> PublishedBook {
    let p = PublishedBook::new(replica);
    p.publish(Some(b), None, height, [height as u8; 32]);
    p
}

fn reader(addrs: &[SocketAddr]) -> ScheduleReader {
    let mut cfg = ScheduleReadConfig::new(
        addrs.iter().map(|a| format!("http://{a}")).collect(),
        ScheduleReadConfig::quorum_of(addrs.len()),
    );
    cfg.timeout_ms = 500;
    cfg.retry_delay_ms = 10;
    ScheduleReader::new(cfg).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_lying_node_is_outvoted() {
    let b = book(5);
    let mut addrs = Vec::new();
    for r in 0..3 {
        addrs.push(serve(schedule_router(Arc::new(published(r, &b, 7)))).await);
    }
    addrs.push(serve(schedule_router(Arc::new(Liar(published(3, &b, 7))))).await);
    let r = reader(&addrs);

    let got = r
        .read(&ScheduleQuery::List(ScheduleFilter::default()))
        .await
        .unwrap();
    assert_eq!(got.at_height, 7);
    assert_eq!(got.agreeing.len(), 3);
    let QueryBody::List(l) = got.body else {
        panic!("not a list")
    };
    assert_eq!(l.items.len(), 5);
    assert!(l.items.iter().all(|s| !s.paused));
    assert_eq!(
        l.items[2].owner,
        Principal::Client(ccron::ClientId::from_index(2))
    );

    // The liar cannot deny a schedule either.
    let got = r
        .read(&ScheduleQuery::Describe {
            target: Target::Key("order-3".into()),
            preview: 4,
        })
        .await
        .unwrap();
    let QueryBody::Describe(Some(d)) = got.body else {
        panic!("not found")
    };
    assert_eq!(d.summary.key.as_deref(), Some("order-3"));
    assert_eq!(d.upcoming.len(), 4);

    // A filter travels intact: only client 1's schedule.
    let got = r
        .read(&ScheduleQuery::List(ScheduleFilter {
            owner: Some(Principal::Client(ccron::ClientId::from_index(1))),
            ..Default::default()
        }))
        .await
        .unwrap();
    let QueryBody::List(l) = got.body else {
        panic!("not a list")
    };
    assert_eq!(l.items.iter().map(|s| s.id).collect::<Vec<_>>(), vec![2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disagreeing_and_unreachable_nodes_are_typed_errors() {
    // Every node answers a different book at one height: no two agree.
    let mut addrs = Vec::new();
    for r in 0..4 {
        addrs.push(serve(schedule_router(Arc::new(published(r, &book(r + 1), 7)))).await);
    }
    let e = reader(&addrs).read(&ScheduleQuery::Book).await.unwrap_err();
    assert!(
        matches!(e, ScheduleReadError::Disagreement { quorum: 2, ref answers } if answers.len() == 4),
        "{e}"
    );

    // Nodes that are down (nothing listens) or have nothing published: unreachable.
    let dead: Vec<SocketAddr> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            v.push(l.local_addr().unwrap());
        }
        v
    };
    let empty = serve(schedule_router(Arc::new(PublishedBook::new(0)))).await;
    let up = serve(schedule_router(Arc::new(published(1, &book(1), 3)))).await;
    let e = reader(&[dead[0], dead[1], empty, up])
        .read(&ScheduleQuery::Book)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            ScheduleReadError::Unreachable {
                answered: 1,
                asked: 4,
                quorum: 2,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("status 503"), "{e}");
}

/// A ledger wrapped in `PublishBook` (how a host that does not publish by itself, such as
/// sim-bft's threaded runtime, serves schedule reads): every executed request and tick
/// publishes the book at its sequence number.
#[test]
fn the_publish_book_wrapper_tracks_the_ledger() {
    use ccron::host::app::{AppError, Application, ClientId, Digest32, ExecContext};
    use ccron::host::{BookConfig, CronLedger, LedgerScheduler};

    struct Nothing;
    impl Application for Nothing {
        fn execute(&mut self, _: ExecContext, _: ClientId, _: &[u8]) -> Vec<u8> {
            Vec::new()
        }
        fn digest(&self) -> Digest32 {
            [0; 32]
        }
        fn snapshot(&self) -> Vec<u8> {
            Vec::new()
        }
        fn restore(&mut self, _: &[u8]) -> Result<(), AppError> {
            Ok(())
        }
    }
    let mut h: Handlers<Nothing> = Handlers::new();
    assert!(h.register("pay", |_| {}));
    let cfg = BookConfig {
        component: 1,
        position: 0,
        limits: Limits::default(),
        book_pages: 16,
        outbox_pages: 2,
    };
    let ledger = CronLedger::new(Nothing, ccron::CronTableRegistry::new())
        .with_scheduler(LedgerScheduler::new(cfg, h));
    let out = PublishedBook::new(2);
    let mut app = ccron_http::PublishBook::new(ledger, out.clone());
    assert_eq!(out.answer(&ScheduleQuery::Book), Err(Unanswerable::NotYet));
    let s = NewSchedule::new(
        "pay",
        Timing::Every {
            period_ms: 1_000,
            start_ms: Some(0),
        },
    );
    let payload = ccron::codec::to_blob(&ScheduleRequest::Create(s)).unwrap();
    let ctx = ExecContext {
        seq: 5,
        agreed_time_ms: Some(10),
    };
    assert!(
        app.execute(ctx, ClientId::from_index(1), &payload)
            .starts_with(b"ok")
    );
    let a = out.answer(&ScheduleQuery::Book).unwrap();
    assert_eq!(a.at_height, 5);
    assert!(matches!(a.body, QueryBody::Book(b) if b.schedules == 1 && b.runs == 0));
    let mut pages = ccron::MemPages::new(4096, 0);
    app.on_tick(ccron::Tick::new(1, 6, Some(2_500)), &mut pages)
        .unwrap();
    let a = out.answer(&ScheduleQuery::Book).unwrap();
    assert_eq!(a.at_height, 6);
    assert!(matches!(a.body, QueryBody::Book(b) if b.runs == 1));
    assert!(matches!(
        out.answer(&ScheduleQuery::Outbox).unwrap().body,
        QueryBody::Outbox(Some(_))
    ));
}
