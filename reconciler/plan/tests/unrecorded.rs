//! Resources of a synthesis whose record was lost (the Composition records none, or a
//! tombstone taken from such a synthesis): only objects labelled as this Composition's are
//! deleted — such a synthesis applied, at most, what it labelled.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;
use plan::{CompositionInfo, Desired, Op, SkipReason};
use serde_json::{Value, json};

#[test]
fn a_tombstone_from_an_unrecorded_synthesis_deletes_only_what_it_labelled() {
    let marked = json!({"enoki.dev/unrecorded": "true"});
    let unlabelled = cm("theirs", marked.clone());
    let labelled = cm("ours", marked);
    let items: Vec<Desired> = [&unlabelled, &labelled]
        .into_iter()
        .map(|m| Desired {
            manifest: m.clone(),
            tombstone: true,
        })
        .collect();
    let w = World::new(items.clone())
        .with_comp(comp(), &items)
        .observe(live(&unlabelled, "3", Value::Null))
        .observe(ours(&labelled, "4"));
    assert_eq!(
        w.op_of(&unlabelled),
        Op::Skip {
            reason: SkipReason::OwnedElsewhere
        }
    );
    assert_eq!(w.op_of(&labelled), Op::Delete { foreground: false });
    // An unmarked tombstone of a recorded synthesis deletes an unlabelled object (adopted,
    // as Eno adopts it).
    let plain = cm("plain", json!({}));
    let items = vec![Desired {
        manifest: plain.clone(),
        tombstone: true,
    }];
    let w = World::new(items.clone())
        .with_comp(comp(), &items)
        .observe(live(&plain, "5", Value::Null));
    assert_eq!(w.op_of(&plain), Op::Delete { foreground: false });
}

#[test]
fn deleting_a_composition_that_records_nothing_deletes_only_what_it_labelled() {
    let unlabelled = cm("theirs", json!({}));
    let labelled = cm("ours", json!({}));
    let items = desired(&[unlabelled.clone(), labelled.clone()]);
    let deleting = CompositionInfo {
        deleting: true,
        deletion_timestamp: Some("2026-12-01T00:00:00Z".into()),
        unrecorded: true,
        ..comp()
    };
    let w = World::new(items.clone())
        .with_comp(deleting.clone(), &items)
        .observe(live(&unlabelled, "3", Value::Null))
        .observe(ours(&labelled, "4"));
    assert_eq!(
        w.op_of(&unlabelled),
        Op::Skip {
            reason: SkipReason::OwnedElsewhere
        }
    );
    assert_eq!(w.op_of(&labelled), Op::Delete { foreground: false });
    // Recorded: the unlabelled object is deleted with the Composition.
    let recorded = CompositionInfo {
        unrecorded: false,
        ..deleting
    };
    let w = World::new(items.clone())
        .with_comp(recorded, &items)
        .observe(live(&unlabelled, "3", Value::Null));
    assert_eq!(w.op_of(&unlabelled), Op::Delete { foreground: false });
}
