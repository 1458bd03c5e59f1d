//! The command line's tests, one binary: the `sim-bft` binary's contract (arguments, exit codes,
//! JSON report), `run` and `preview`.

mod cli_contract;
mod preview_cli;
mod sim_cli;
