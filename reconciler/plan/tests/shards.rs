//! With `--shards`, every object is applied with its Composition's shard label: a change of
//! the shard count applies each object once more, and a client-side merge patch always
//! carries the label (an object written before, or relabelled by hand, gets it back).
#![allow(clippy::unwrap_used)]

mod common;
use common::*;
use plan::{ApplyMode, CompositionInfo, Op};
use serde_json::{Value, json};

fn sharded(shard: &str) -> CompositionInfo {
    CompositionInfo {
        shard: Some(shard.into()),
        ..comp()
    }
}

#[test]
fn a_new_shard_count_applies_each_object_once_with_its_label() {
    let m = cm("a", json!({}));
    let items = desired(std::slice::from_ref(&m));
    // Applied unsharded and recorded: in sync.
    let w = World::new(items.clone())
        .observe(ours(&m, "1"))
        .record_applied();
    assert!(matches!(w.op_of(&m), Op::Skip { .. }));
    // Sharded: applied once more, with the label; then in sync again.
    let w = w.with_comp(sharded("1-of-4"), &items);
    let Op::Apply { object } = w.op_of(&m) else {
        panic!("{:?}", w.op_of(&m))
    };
    assert_eq!(object["metadata"]["labels"]["enoki.dev/shard"], "1-of-4");
    let w = w.record_applied();
    assert!(matches!(w.op_of(&m), Op::Skip { .. }));
}

#[test]
fn a_client_side_patch_always_sets_the_shard_label() {
    let m = cm("a", json!({}));
    let items = desired(std::slice::from_ref(&m));
    let mut w = World::new(items.clone())
        .with_comp(sharded("2-of-4"), &items)
        .observe(live(&m, "1", Value::Null));
    w.options.mode = ApplyMode::ClientSide;
    // The previous snapshot already carried the label (stamped as now): the patch still sets
    // it, so an object that lost it, or never had it, gets it.
    let mut prev = m.clone();
    prev["metadata"]["labels"] =
        json!({"enoki.dev/managed-by": "uid-1", "enoki.dev/shard": "2-of-4"});
    w.previous.insert(key(&m), prev);
    let Op::MergePatch { patch, .. } = w.op_of(&m) else {
        panic!("{:?}", w.op_of(&m))
    };
    assert_eq!(patch["metadata"]["labels"]["enoki.dev/shard"], "2-of-4");
}
