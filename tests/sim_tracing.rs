//! `tracing` events of a simulated run carry the replica id and the simulated time.
//!
//! Alone in its test binary on purpose: `tracing` caches each callsite's interest process-wide,
//! so a test running at the same time without a subscriber can leave the replica span's callsite
//! disabled for this test's scoped subscriber (the span then silently disappears from the
//! captured lines).

use std::io::Write;
use std::sync::{Arc, Mutex};

use sim_bft::sim::LedgerKind;
use sim_bft::sim::cluster::Cluster;

mod support;
use support::Loud;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn events_carry_the_replica_and_the_simulated_time() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("info,sim_bft::sim=debug")
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        // A user's own events (Loud) and the demo ledger's fires.
        let out = Cluster::builder()
            .duration_ms(1_500, 1_000)
            .ticks(vec![], 0) // Loud has no cron table: a ticking component is refused
            .clients(1, 500)
            .app(|_| Loud::default())
            .build()
            .unwrap()
            .run();
        assert!(out.ok(), "{:?}", out.violations);
        let demo = Cluster::builder()
            .duration_ms(6_000, 1_000)
            .ledger(LedgerKind::Demo)
            .ticks(LedgerKind::Demo.default_components(), 1_000)
            .clients(0, 0)
            .build()
            .unwrap()
            .run();
        assert!(!demo.events.fires.is_empty());
    });
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let executed: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("user request executed"))
        .collect();
    assert!(!executed.is_empty(), "{text}");
    for l in &executed {
        assert!(l.contains("replica{id=") && l.contains("sim_ms="), "{l}");
    }
    for id in 0..4 {
        assert!(
            executed
                .iter()
                .any(|l| l.contains(&format!("replica{{id={id} ")))
        );
    }
    let fires: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("sim_bft::sim: fire "))
        .collect();
    assert!(!fires.is_empty(), "{text}");
    for l in &fires {
        assert!(
            l.contains("replica=") && l.contains("sim_ms=") && l.contains("due_ms"),
            "{l}"
        );
    }
}
