//! Per-reason counters of a replica: every dropped message, rejected request and time-bound
//! excursion is counted here (and traced where it happens).

use std::collections::BTreeMap;

/// Named counters, in name order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metrics {
    counts: BTreeMap<&'static str, u64>,
}

impl Metrics {
    /// Adds one to counter `name`.
    pub fn inc(&mut self, name: &'static str) {
        *self.counts.entry(name).or_insert(0) += 1;
    }

    /// Adds `by` to counter `name`.
    pub fn add(&mut self, name: &'static str, by: u64) {
        *self.counts.entry(name).or_insert(0) += by;
    }

    /// Raises gauge `name` to `value` if it is higher (a high-water mark, e.g. peak bytes).
    pub fn set_max(&mut self, name: &'static str, value: u64) {
        let v = self.counts.entry(name).or_insert(0);
        *v = (*v).max(value);
    }

    /// The value of counter `name` (0 when never incremented).
    pub fn get(&self, name: &str) -> u64 {
        self.counts.get(name).copied().unwrap_or(0)
    }

    /// Every counter, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.counts.iter().map(|(k, v)| (*k, *v))
    }

    /// Sum of the counters of dropped inputs (every name starting with `drop_`).
    pub fn dropped(&self) -> u64 {
        self.counts
            .iter()
            .filter(|(k, _)| k.starts_with("drop_"))
            .map(|(_, v)| *v)
            .sum()
    }
}
