//! What the slice cache holds per cached slice, counted by an allocator that counts this
//! thread's live bytes (in the unit-test binary only): the same for a slice of three
//! 128 KiB manifests as for one of three tiny ones, and within a small bound.
#![allow(unsafe_code, clippy::cast_possible_wrap, clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use super::compact::for_cache;
use kube::runtime::{reflector, watcher};

struct Counting;

thread_local! {
    static NET: Cell<isize> = const { Cell::new(0) };
}

// SAFETY: delegates to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = NET.try_with(|n| n.set(n.get() + l.size() as isize));
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let _ = NET.try_with(|n| n.set(n.get() + l.size() as isize));
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        let _ = NET.try_with(|n| n.set(n.get() - l.size() as isize));
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let _ = NET.try_with(|n| n.set(n.get() + new as isize - l.size() as isize));
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn net() -> isize {
    NET.with(Cell::get)
}

fn slice_json(i: usize, pad: usize) -> String {
    let pad = "x".repeat(pad);
    let resources: Vec<_> = (0..3)
        .map(|j| {
            let m = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("big-{j}"), "namespace": "bench-namespace-1234"},
                "data": {"pad": pad}});
            serde_json::json!({"manifest": m.to_string()})
        })
        .collect();
    serde_json::json!({
        "apiVersion": "enoki.dev/v1alpha1", "kind": "ResourceSlice",
        "metadata": {"name": format!("composition-{i:04}-1a2b3c4d-{i}"),
            "namespace": "bench-namespace-1234",
            "uid": "0b6c1f4e-8d7a-4f6e-9c1d-2a3b4c5d6e7f", "resourceVersion": "123456",
            "generation": 1, "creationTimestamp": "2026-11-29T10:00:00Z",
            "labels": {"enoki.dev/composition": format!("composition-{i:04}")},
            "ownerReferences": [{"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
                "name": format!("composition-{i:04}"), "uid": "1b6c1f4e-8d7a-4f6e-9c1d-2a3b4c5d6e7f",
                "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "enoki", "operation": "Update", "apiVersion": "enoki.dev/v1alpha1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"synthesisUUID": "1a2b3c4d-8d7a-4f6e-9c1d-2a3b4c5d6e7f", "resources": resources}
    })
    .to_string()
}

/// Live bytes per slice once `n` slices with manifests of `pad` bytes are cached as the
/// controller caches them (labels and field managers dropped, compacted, in a reflector store).
fn held_per_slice(n: usize, pad: usize) -> isize {
    let (reader, mut writer) = reflector::store::<crds::ResourceSlice>();
    let texts: Vec<String> = (0..n).map(|i| slice_json(i, pad)).collect();
    let before = net();
    for t in &texts {
        let mut s: crds::ResourceSlice = serde_json::from_str(t).unwrap();
        for_cache(&mut s, false);
        writer.apply_watcher_event(&watcher::Event::Apply(s));
    }
    let held = (net() - before) / n as isize;
    assert_eq!(reader.state().len(), n);
    held
}

#[test]
fn a_cached_slice_holds_what_its_identities_take_whatever_its_bytes() {
    let large = held_per_slice(100, 128 * 1024);
    let small = held_per_slice(100, 1);
    eprintln!("bytes held per cached slice: {large} (3 × 128 KiB manifests), {small} (3 tiny)");
    assert!(large <= small + 64, "{large} B held against {small} B");
    assert!(large <= 2048, "{large} B held per slice");
}
