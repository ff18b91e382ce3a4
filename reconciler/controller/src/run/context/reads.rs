//! The reads handle: what reading a Composition's world takes (its Synthesizer, inputs,
//! slices and observed outputs). The controller's reads go through its caches, are tracked so
//! a change re-reconciles the Composition, and remember what they parsed; a one-shot command
//! (`enoki diff`) reads with plain GETs and keeps nothing.

use super::*;

/// What reading takes, borrowed from a [`Context`] ([`Context::reads`]) or built by a command
/// from [`Clusters`] alone ([`Reads::uncached`]).
#[derive(Clone, Copy)]
pub(crate) struct Reads<'a> {
    /// The clusters, and the account each Composition reads as.
    pub(crate) clusters: &'a Clusters,
    /// `--no-cross-namespace-refs`: collections are read in the Composition's namespace.
    pub(crate) no_cross_namespace_refs: bool,
    /// The keys that open sealed Secrets in slices (none in a command: it runs as the user).
    pub(crate) keys: &'a super::super::sealing::SliceKeys,
    /// The controller's caches, memory and metrics; `None`: every read is a GET, nothing is
    /// tracked or remembered.
    pub(crate) kept: Option<Kept<'a>>,
}

/// The parts of a controller that its reads use and feed.
#[derive(Clone, Copy)]
pub(crate) struct Kept<'a> {
    /// Input, slice and Composition caches (and the watches reads are tracked in).
    pub(crate) caches: &'a Caches,
    /// What is remembered per Composition (slice states written, parsed slices).
    pub(crate) memory: &'a super::super::memory::Memory,
    /// Counters of the reads made.
    pub(crate) metrics: &'a metrics::Metrics,
}

impl<'a> Reads<'a> {
    /// Reads for a one-shot command: plain GETs with `clusters`, nothing kept.
    pub(crate) fn uncached(
        clusters: &'a Clusters,
        opts: &crate::run::TenancyOptions,
        keys: &'a super::super::sealing::SliceKeys,
    ) -> Reads<'a> {
        Reads {
            clusters,
            no_cross_namespace_refs: opts.no_cross_namespace_refs,
            keys,
            kept: None,
        }
    }
}

impl Context {
    /// The reads handle of this controller (through its caches, tracked, remembered).
    pub(crate) fn reads(&self) -> Reads<'_> {
        Reads {
            clusters: &self.clusters,
            no_cross_namespace_refs: self.opts.tenancy.no_cross_namespace_refs,
            keys: &self.slice_keys,
            kept: Some(Kept {
                caches: &self.caches,
                memory: &self.state.memory,
                metrics: &self.report.metrics,
            }),
        }
    }
}
