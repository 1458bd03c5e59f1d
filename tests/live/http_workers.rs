//! A shorter run of `examples/http_workers.rs`: a live threaded cluster, three axum workers on
//! loopback, a worker and the consumer killed and restarted mid-run; every effect is performed
//! exactly once at the workers and every result applied exactly once on every replica. The
//! consumer reads the cluster only through the replicas' HTTP read endpoints, one of which lies.

#[path = "../../examples/http_workers.rs"]
mod example;

#[test]
fn live_cluster_to_http_workers_and_back_exactly_once() {
    let opts = example::Options {
        orders: 60,
        expiry_ms: 100,
        guard_s: 60,
        liar: true,
    };
    let report = example::run(&opts).expect("run");
    assert!(report.exactly_once(opts.orders), "{report:#?}");
    // The faults happened: worker 1 made the consumer retry, a restarted consumer was answered
    // from the workers' memory or re-sent nothing it had not delivered.
    let retries: u64 = report.dispatch.iter().map(|(d, _)| d.retries).sum();
    assert!(retries > 0, "{report:#?}");
    assert_eq!(report.dispatch.len(), 2, "the consumer was restarted once");
    assert!(report.results_sent >= opts.orders);
    assert!(report.results_resent <= report.results_sent);
    // Failed reads (a replica answering 503 before its first commit) are retried, not fatal.
    println!("failed endpoint reads: {}", report.read_failures);
}
