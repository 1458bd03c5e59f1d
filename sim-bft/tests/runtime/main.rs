//! The threaded runtime's tests, one binary: the 4-replica cluster on OS threads and its client.

mod runtime;
mod runtime_client;
