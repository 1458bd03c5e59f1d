//! Shared pieces of the runnable examples and the cross-crate tests of the ccron workspace.
//!
//! The libraries live in `ccron/` (the scheduler a ledger links) and `sim-bft/` (the simulated
//! BFT cluster). This root package only owns `examples/` and `tests/`.
