//! The memory sweep every 15 s: forgets Compositions gone without enoki's finalizer,
//! publishes the gauges of what is cached (remembered Compositions, watched kinds, input
//! caches, shard sizes, slice-cache bytes), and gives freed memory back to the system.

use std::time::Duration;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;

use crate::run::context::Context;
use crate::run::metrics;
use crate::run::shard::Shard;
use crds::ResourceSlice;

/// Sweeps and publishes every 15 s, for ever (see the module docs).
pub(super) async fn sweep(sweeper: std::sync::Arc<Context>) {
    // Gauges are shared by the stacks of the process: each adds its own change.
    // Remembered, watched kinds, inputs whole, as metadata, arrived, names wanted.
    let mut last = [0_i64; 6];
    loop {
        tokio::time::sleep(Duration::from_secs(15)).await;
        let n = sweeper.sweep();
        if n > 0 {
            tracing::debug!(forgotten = n, "swept memory of deleted Compositions");
        }
        let watches = &sweeper.caches.watches;
        let (inputs, managed, _, _) = watches.sizes();
        let m = &sweeper.report.metrics;
        bump(&m.remembered, &mut last[0], sweeper.remembered());
        bump(&m.watched_kinds, &mut last[1], inputs + managed);
        let (w, st) = watches.input_objects();
        let kept = |kept: &str| metrics::KeptLabel { kept: kept.into() };
        let cached = &m.input_cache_objects;
        bump(&cached.get_or_create(&kept("whole")), &mut last[2], w);
        bump(&cached.get_or_create(&kept("metadata")), &mut last[3], st);
        let arrived = watches.arrived_inputs();
        bump(
            &cached.get_or_create(&kept("arrived")),
            &mut last[4],
            arrived,
        );
        let wanted = watches.wanted_inputs();
        bump(&m.input_names_wanted, &mut last[5], wanted);
        publish_shard_sizes(&sweeper);
        publish_slice_sizes(&sweeper);
        release_freed_memory();
        if let Some((in_use, free)) = heap_bytes() {
            m.heap_in_use_bytes.set(in_use);
            m.heap_free_bytes.set(free);
        }
    }
}

/// Adds to a gauge shared by the stacks of the process this stack's change since `last`.
fn bump(gauge: &prometheus_client::metrics::gauge::Gauge, last: &mut i64, now: usize) {
    let now = i64::try_from(now).unwrap_or(i64::MAX);
    gauge.inc_by(now - *last);
    *last = now;
}

/// The per-shard gauges of Compositions and managed objects cached.
pub(super) fn publish_shard_sizes(ctx: &Context) {
    let shards = *ctx.limits.shards.borrow();
    let count = usize::try_from(shards.count()).unwrap_or(1);
    let (mut comps, mut objects) = (vec![0_i64; count], vec![0_i64; count]);
    let index = |uid: &str| usize::try_from(Shard::of_uid(uid, shards.count())).unwrap_or(0);
    for c in ctx.caches.compositions.state() {
        comps[index(&c.uid().unwrap_or_default())] += 1;
    }
    ctx.caches
        .watches
        .managed_owners(|owner| objects[index(owner.unwrap_or_default())] += 1);
    for s in shards.iter() {
        let label = metrics::ShardLabel { shard: s.label() };
        let i = usize::try_from(s.index).unwrap_or(0);
        let m = &ctx.report.metrics;
        m.shard_compositions.get_or_create(&label).set(comps[i]);
        m.shard_managed_objects
            .get_or_create(&label)
            .set(objects[i]);
    }
}

/// The slice cache's gauges: bytes the cached slices store, and bytes the cache holds.
pub(super) fn publish_slice_sizes(ctx: &Context) {
    let (mut stored, mut held) = (0_usize, 0_usize);
    for s in ctx.caches.slices.state() {
        stored += crate::run::slices::stored_bytes(&s);
        held += crate::run::slices::manifest_bytes(&s.spec.resources);
    }
    let m = &ctx.report.metrics;
    m.slice_stored_bytes
        .set(i64::try_from(stored).unwrap_or(i64::MAX));
    m.slice_held_bytes
        .set(i64::try_from(held).unwrap_or(i64::MAX));
}

/// Gives memory the allocator holds free back to the system (glibc keeps what a burst of
/// large reads — whole slices ingested at a start — freed, per thread arena): the controller's
/// resident memory follows what it holds, not its peaks. musl's allocator returns it itself.
#[allow(unsafe_code)]
pub(super) fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes no pointer.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The allocator's bytes in use and in free chunks (glibc's `mallinfo2`: builds need glibc
/// 2.33 or later); `None` elsewhere.
#[allow(unsafe_code)]
fn heap_bytes() -> Option<(i64, i64)> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's statistics; it takes no pointer.
        let info = unsafe { libc::mallinfo2() };
        let bytes = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        Some((
            bytes(info.uordblks.saturating_add(info.hblkhd)),
            bytes(info.fordblks),
        ))
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}

/// Arenas of glibc's allocator: one per thread by default (up to 8 per core), each keeping
/// what a burst of large reads freed, so resident memory would follow the peaks of every
/// thread. One: the controller's allocations are short and its threads few.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const ARENAS: i32 = 1;

/// Allocations from this size up get pages of their own, given back when freed. glibc
/// raises its threshold after each large free (up to 32 MiB), so the buffers of whole slices
/// read at ingest would otherwise stay in the arenas.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: i32 = 64 * 1024;

/// Limits glibc's allocator to one arena and fixes its mmap threshold (before the
/// runtime's threads start; `MALLOC_ARENA_MAX` and `MALLOC_MMAP_THRESHOLD_` set them
/// otherwise). musl's allocator has neither.
#[allow(unsafe_code)]
pub fn limit_allocator_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets an allocator parameter; called before other threads allocate.
    unsafe {
        if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
            libc::mallopt(libc::M_ARENA_MAX, ARENAS);
        }
        if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        }
    }
}

/// Whether the API server streams a watch's initial state (`sendInitialEvents`, Kubernetes'
/// `WatchList`, on by default in 1.32 and from 1.34): the slice cache then reads one slice at
/// a time instead of a page of them. Asked with a watch that selects no object (its only event is
/// the end-of-initial-events bookmark); any error or a server without it: pages.
pub(super) async fn streams_initial_events(api: &Api<ResourceSlice>) -> bool {
    use kube::api::WatchParams;
    use kube::core::WatchEvent;
    let wp = WatchParams::default()
        .fields("metadata.name=enoki-probe-selects-nothing")
        .timeout(5)
        .initial_events();
    let probe = async {
        let mut events = api.watch(&wp, "").await.ok()?.boxed();
        while let Some(event) = events.next().await {
            if let Ok(WatchEvent::Bookmark(b)) = event {
                return Some(
                    b.metadata
                        .annotations
                        .contains_key("k8s.io/initial-events-end"),
                );
            }
            if !matches!(event, Ok(WatchEvent::Added(_))) {
                return Some(false);
            }
        }
        Some(false)
    };
    let streams = tokio::time::timeout(Duration::from_secs(10), probe)
        .await
        .ok()
        .flatten()
        .unwrap_or(false);
    tracing::info!(streams, "slice cache: streamed initial lists");
    streams
}
