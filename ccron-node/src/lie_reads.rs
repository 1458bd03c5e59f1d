//! The `lie-reads` Byzantine validator's read endpoints
//! ([`crate::hostile::ByzantineKind::LieReads`]): every schedule read answer it serves is well
//! formed and carries its true height, but its body is doctored ([`lie`]). The honest side it
//! attacks: an operator's reader (`ccron_http::ScheduleReader`, the `ccron` CLI), which
//! believes only an answer f+1 nodes return identically at one height, and so must outvote it.
//!
//! A layer over the node's routes ([`layer`]): only answers of the schedule read routes are
//! touched (`GET` under `/ccron/v1/`, decoded with the bounded query decoder); every other
//! answer, an answer that does not decode, and everything before the behaviour's start time
//! is served unchanged.

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use ccron::schedule::query::{MAX_ANSWER_BYTES, QueryAnswer, QueryBody};

use crate::hostile::{Byzantine, ByzantineKind};

/// The paths whose answers are schedule query answers.
const READ_PATHS: [&str; 5] = [
    ccron_http::schedules::SCHEDULES_PATH,
    ccron_http::schedules::SCHEDULE_PATH,
    ccron_http::schedules::ENTRY_PATH,
    ccron_http::schedules::BOOK_PATH,
    ccron_http::schedules::OUTBOX_STATE_PATH,
];

/// `routes`, lying in their schedule read answers from `byzantine`'s start time when its kind
/// is [`ByzantineKind::LieReads`]; unchanged otherwise.
pub fn layer(routes: Router, byzantine: Option<Byzantine>) -> Router {
    match byzantine {
        Some(b) if b.kind == ByzantineKind::LieReads => routes.layer(axum::middleware::from_fn(
            move |req: Request, next: Next| answer_falsely(b, req, next),
        )),
        _ => routes,
    }
}

async fn answer_falsely(b: Byzantine, req: Request, next: Next) -> Response {
    let read = req.method() == axum::http::Method::GET && READ_PATHS.contains(&req.uri().path());
    if !read || !b.active(crate::core::now_ms()) {
        return next.run(req).await;
    }
    let (parts, body) = next.run(req).await.into_parts();
    if !parts.status.is_success() {
        return Response::from_parts(parts, body);
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_ANSWER_BYTES).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let doctored = QueryAnswer::decode(&bytes)
        .ok()
        .and_then(|a| lie(a).encode().ok());
    let mut parts = parts;
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(
        parts,
        Body::from(doctored.unwrap_or_else(|| bytes.to_vec())),
    )
}

/// The doctored answer: the same replica and height, a body that differs from the true one:
/// a list hides its last schedule and claims seven more matches than it has (a list of no
/// schedules still lies, by its count); a description, a table entry and the outbox are denied
/// (`None`; an answer of none stays as it is); the book state claims one more schedule.
pub fn lie(mut a: QueryAnswer) -> QueryAnswer {
    match &mut a.body {
        QueryBody::List(list) => {
            list.items.pop();
            list.matched = list.matched.saturating_add(7);
        }
        QueryBody::Describe(d) => *d = None,
        QueryBody::Entry(e) => *e = None,
        QueryBody::Outbox(o) => *o = None,
        QueryBody::Book(book) => {
            book.schedules = book.schedules.saturating_add(1);
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccron::schedule::query::ScheduleList;

    #[test]
    fn every_answer_is_doctored_at_its_true_height() {
        let list = QueryAnswer {
            replica: 3,
            at_height: 41,
            body: QueryBody::List(ScheduleList {
                component: 7,
                matched: 0,
                items: Vec::new(),
                next_after: None,
                entries: None,
            }),
        };
        let lied = lie(list.clone());
        assert_eq!((lied.replica, lied.at_height), (3, 41));
        assert_ne!(lied, list);
        // Still a well-formed answer: it encodes and decodes back as it is.
        let bytes = lied.encode().unwrap();
        assert_eq!(QueryAnswer::decode(&bytes).unwrap(), lied);
        let none = QueryAnswer {
            replica: 3,
            at_height: 41,
            body: QueryBody::Describe(None),
        };
        assert_eq!(lie(none.clone()), none, "nothing to deny");
    }
}
