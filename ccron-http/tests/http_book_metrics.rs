//! The book's replicated counters scraped over loopback (`ccron_http::book_metrics`): two
//! replicas fed the same requests, one of them restarted (its book reloaded from its pages),
//! serve identical `ccron_book_refusals_total{reason}` lines next to `ccron_book_runs_total`,
//! and the quorum reader believes the same refusals in the book state (query format 6).

use std::net::SocketAddr;

use axum::Router;
use ccron::schedule::query::QueryBody;
use ccron::schedule::{
    Handlers, Limits, NewSchedule, Principal, RefusalCounters, ScheduleRequest, Scheduler, Target,
    Timing,
};
use ccron::{MemPages, PageRange};
use ccron_http::{
    PublishedBook, ScheduleQuery, ScheduleReadConfig, ScheduleReader, metrics_router,
    schedule_router,
};
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;

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

async fn scrape(addr: SocketAddr) -> String {
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let req = Request::get(format!("http://{addr}/metrics"))
        .body(Empty::new())
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

fn range() -> PageRange {
    PageRange::new(0, 64).unwrap()
}

/// A replica's book after the requests: three schedules, then two refused backfills (an
/// unknown key, a one-shot) and a calendar that is not installed (refused), saved to its
/// pages after each request; `restart` reloads it from the pages after every save.
fn replica(restart: bool) -> Scheduler {
    let mut h: Handlers<u64> = Handlers::new();
    assert!(h.register("pay", |ctx| *ctx.state += 1));
    let mut pages = MemPages::new(4_096, 64);
    let mut b = Scheduler::new_in(1, Limits::default(), range());
    let every = Timing::Every {
        period_ms: 1_000,
        start_ms: Some(0),
    };
    let cron = Timing::Cron {
        expression: "0 9 * * *".into(),
        zone: None,
    };
    let once = Timing::At(ccron::Due::Time(5_000));
    let reqs = [
        ScheduleRequest::Create(NewSchedule::new("pay", every).with_key("every")),
        ScheduleRequest::Create(NewSchedule::new("pay", cron).with_key("cron")),
        ScheduleRequest::Create(NewSchedule::new("pay", once).with_key("once")),
        ScheduleRequest::Backfill {
            target: Target::Key("nope".into()),
            from_ms: 0,
            to_ms: 1,
        },
        ScheduleRequest::Backfill {
            target: Target::Key("once".into()),
            from_ms: 0,
            to_ms: 1,
        },
        ScheduleRequest::SetCalendar {
            target: Target::Key("cron".into()),
            calendar: Some("holidays".into()),
        },
    ];
    for (k, req) in reqs.into_iter().enumerate() {
        let r = b.apply(&Principal::Host, req, &h, k as u64 + 1, Some(10));
        assert_eq!(r.is_ok(), k < 3, "request {k}: {r:?}");
        b.save(&mut pages, range()).unwrap();
        if restart {
            b = Scheduler::load(1, Limits::default(), &pages, range()).unwrap();
        }
    }
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_serve_the_same_refusals_after_a_restart() {
    let expected = RefusalCounters {
        slot_full: 0,
        calendar: 1,
        backfill: 2,
    };
    let mut addrs = Vec::new();
    let mut scraped = Vec::new();
    for (r, restart) in [(0, false), (1, true), (2, false)] {
        let book = replica(restart);
        assert_eq!(book.refusals(), expected, "replica {r}");
        let p = PublishedBook::new(r);
        p.publish(Some(&book), None, 7, [7; 32]);
        let addr =
            serve(schedule_router(std::sync::Arc::new(p.clone())).merge(metrics_router(p))).await;
        scraped.push(scrape(addr).await);
        addrs.push(addr);
    }
    for text in &scraped {
        for line in [
            "ccron_book_height 7",
            "ccron_book_runs_total{event=\"fired\"} 0",
            "ccron_book_refusals_total{reason=\"slot_full\"} 0",
            "ccron_book_refusals_total{reason=\"calendar\"} 1",
            "ccron_book_refusals_total{reason=\"backfill\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
    // The same series on every replica (a family's series come in no fixed order).
    let sorted = |t: &String| {
        let mut l: Vec<String> = t.lines().map(str::to_owned).collect();
        l.sort_unstable();
        l
    };
    assert!(
        scraped.iter().all(|t| sorted(t) == sorted(&scraped[0])),
        "{scraped:?}"
    );
    let mut cfg = ScheduleReadConfig::new(
        addrs.iter().map(|a| format!("http://{a}")).collect(),
        ScheduleReadConfig::quorum_of(addrs.len()),
    );
    cfg.timeout_ms = 2_000;
    let b = ScheduleReader::new(cfg)
        .unwrap()
        .read(&ScheduleQuery::Book)
        .await
        .unwrap();
    let QueryBody::Book(state) = b.body else {
        panic!("{:?}", b.body)
    };
    assert_eq!(state.refusals, Some(expected));
    assert_eq!(b.agreeing.len(), 3);
}
