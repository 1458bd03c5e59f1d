//! Custom client workloads: what each simulated user client sends, supplied by a test.
//!
//! By default the simulator's clients send key-value `Put`s
//! ([`crate::ledgers::KvOp`], key `c<client>/k<number mod 64>`, value the request number). A
//! test that runs its own ledger gives each client a [`Workload`] instead
//! ([`super::cluster::Cluster::workload`]): the simulator asks it for the payload of every
//! request the client sends, signs it as that client, and hands it the result of every honest
//! replica's reply. Each client's workload draws from its own random stream, split from the
//! run's seed and the client id ([`workload_rng`]), so a run stays a function of its seed.

use super::rng::SimRng;

/// The requests of one simulated client (see the module documentation).
///
/// Requests go out every `request_interval_ms` of simulated time
/// ([`super::SimConfig::request_interval_ms`]); `number` counts them from 0. The replicas execute
/// each payload as this client's request ([`crate::app::Application::execute`] with
/// `ClientId` = the client's index).
pub trait Workload {
    /// The payload of this client's request `number`. Draw randomness only from `rng`.
    fn payload(&mut self, number: u64, rng: &mut SimRng) -> Vec<u8>;

    /// The result of request `number` as an honest replica replied it (called once per honest
    /// reply: up to n times per request, duplicates included). An `Err` is reported as a
    /// [`super::ViolationKind::Workload`] violation naming the client: the place for a
    /// workload's own oracle ("no hostile request is answered ok"). Default: accept.
    fn on_reply(&mut self, number: u64, result: &[u8]) -> Result<(), String> {
        let _ = (number, result);
        Ok(())
    }
}

/// Builds client `client`'s workload (once, when the simulator is built).
pub type WorkloadFactory = std::rc::Rc<dyn Fn(u32) -> Box<dyn Workload>>;

/// The random stream of client `client`'s workload in a run with `seed` (independent of every
/// other stream of the run).
pub fn workload_rng(seed: u64, client: u32) -> SimRng {
    SimRng::split(seed, &format!("workload/{client}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_streams_differ_and_repeat() {
        let a = workload_rng(1, 0).next_u64();
        assert_eq!(a, workload_rng(1, 0).next_u64());
        assert_ne!(a, workload_rng(1, 1).next_u64());
        assert_ne!(a, workload_rng(2, 0).next_u64());
    }
}
