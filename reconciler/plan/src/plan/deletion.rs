//! Deleting: tombstones of resources a new synthesis dropped, and the plan of a Composition
//! being deleted (deletion groups, strategies, foreground waits).

use super::*;

/// The steps of the tombstones (resources the previous synthesis had and this one dropped):
/// deleted unless reconciliation or pruning is disabled or another Composition's label is on
/// them, and — as in Eno's tree, where a tombstone keeps its readiness group — only once the
/// highest group of this synthesis below the tombstone's is ready (the groups above do not
/// wait for it, as Eno's do), and never before its overrides ran (`ready`: whether each
/// resource of this synthesis counts as ready for the groups after it). Whether one still
/// exists (so the pass must look again).
pub(super) fn tombstone_steps(
    input: &PlanInput<'_>,
    ready: &std::collections::HashMap<&ResourceKey, bool>,
    steps: &mut Vec<Step>,
) -> bool {
    let mut poll = false;
    for r in input.prepared.resources.iter().filter(|r| r.tombstone) {
        let live = input.observed.get(&r.key);
        if r.patch.is_some() {
            let op = Op::Skip {
                reason: SkipReason::PatchLeft,
            };
            steps.push(deletion_step(r, live, op));
            continue;
        }
        // Labelled for another Composition — even one that is gone, as long as this one never
        // adopted the object (it would carry this one's label then) — or never labelled by a
        // synthesis whose record was lost: never deleted from here.
        if not_ours(r, live, input.composition) {
            steps.push(deletion_step(
                r,
                None,
                Op::Skip {
                    reason: SkipReason::OwnedElsewhere,
                },
            ));
            continue;
        }
        // Another Composition's object and a Patch's target are settled above; what is left
        // is this Composition's own, and a Symphony being deleted leaves it.
        if input.composition.symphony_deleting() {
            let op = Op::Skip {
                reason: SkipReason::Orphaned,
            };
            steps.push(deletion_step(r, live, op));
            continue;
        }
        // Overrides decide deletion too (Eno's resource-migration recipe).
        let (settings, deferred) = settings_after_overrides(r, live, input.composition);
        let foreground = settings.deletion_strategy == DeletionStrategy::Foreground;
        let op = if deferred && live.is_some() {
            // Not deleted before every override ran: one may protect it (migration).
            Op::Skip {
                reason: SkipReason::CelTimeSpent,
            }
        } else if settings.disable_reconciliation {
            Op::Skip {
                reason: SkipReason::ReconciliationDisabled,
            }
        } else if settings.prune_disabled {
            Op::Skip {
                reason: SkipReason::PruneDisabled,
            }
        } else if let Some(on) = tombstone_waits_on(r, live, input, ready) {
            Op::Wait { on }
        } else {
            delete_op(live, foreground)
        };
        if live.is_some()
            && !matches!(
                op,
                Op::Skip {
                    reason: SkipReason::ReconciliationDisabled | SkipReason::PruneDisabled
                }
            )
        {
            poll = true;
        }
        steps.push(deletion_step(r, live, op));
    }
    poll
}

/// The unready resources of the highest readiness group below tombstone `r`'s that a delete
/// of its live object waits for; `None` when there is nothing to delete or nothing to wait for.
fn tombstone_waits_on(
    r: &PreparedResource,
    live: Option<&Value>,
    input: &PlanInput<'_>,
    ready: &std::collections::HashMap<&ResourceKey, bool>,
) -> Option<Vec<ResourceKey>> {
    if !matches!(delete_op(live, false), Op::Delete { .. }) {
        return None;
    }
    let ordering = &input.prepared.ordering;
    let below = ordering.group_below(r.settings.readiness_group)?;
    let on: Vec<ResourceKey> = ordering
        .group_members(below)
        .iter()
        .filter(|k| !ready.get(k).copied().unwrap_or(false))
        .cloned()
        .collect();
    (!on.is_empty()).then_some(on)
}

/// Composition deletion, ordered as Eno orders it: only resources with a deletion group are
/// ordered (an explicit `deletion-group`, or Eno's infrastructure kinds, which default to the
/// negation of their create group); the others are deleted at once and hold nothing back. A
/// group waits until every resource of the lower groups is released: gone, or — for a
/// background delete — terminating (it has a `deletionTimestamp`).
pub(super) fn plan_deletion(input: PlanInput<'_>) -> Plan {
    let mut ranked: Vec<(Option<i64>, &PreparedResource, (Settings, bool))> = input
        .prepared
        .resources
        .iter()
        .map(|r| {
            // Overrides run only for what is still there: a gone object holds nothing back,
            // and its overrides would only spend the pass's CEL time.
            let live = input.observed.get(&r.key);
            let settings = match live {
                Some(_) => settings_after_overrides(r, live, input.composition),
                None => (r.settings.clone(), false),
            };
            let group = ordering::deletion_group(r.defaults_kind(), settings.0.deletion_group);
            (group, r, settings)
        })
        .collect();
    ranked.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.key.cmp(&b.1.key)));
    let mut steps = Vec::with_capacity(ranked.len());
    let mut poll = false;
    let mut held_below: Vec<ResourceKey> = Vec::new();
    let mut current_rank: Option<Option<i64>> = None;
    let mut held_in_rank: Vec<ResourceKey> = Vec::new();
    for (rank, r, (settings, deferred)) in ranked {
        if current_rank != Some(rank) {
            held_below.append(&mut held_in_rank);
            current_rank = Some(rank);
        }
        let live = input.observed.get(&r.key);
        let foreground = settings.deletion_strategy == DeletionStrategy::Foreground;
        let foreign = not_ours(r, live, input.composition);
        // Another Composition's object is never deleted, and nothing waits for it.
        let live = if foreign { None } else { live };
        let held = (rank.is_some() && live.is_some()).then_some(&held_below[..]);
        let op = if deferred && !foreign && live.is_some() && !input.composition.symphony_deleting()
        {
            // Not deleted before every override ran (one may orphan or protect it); it holds
            // its rank meanwhile.
            Op::Skip {
                reason: SkipReason::CelTimeSpent,
            }
        } else {
            deletion_op(r, live, &settings, (foreign, held), &input)
        };
        let kept = matches!(
            op,
            Op::Skip {
                reason: SkipReason::ReconciliationDisabled
                    | SkipReason::Orphaned
                    | SkipReason::PruneDisabled
                    | SkipReason::PatchLeft
            }
        );
        if live.is_some() && !kept {
            poll = true;
            let terminating = live
                .and_then(|l| l.pointer("/metadata/deletionTimestamp"))
                .is_some_and(|t| !t.is_null());
            // A fail-open background delete holds nothing back: Eno counts it deleted once
            // tried, whether or not the delete went through.
            let fail_open = !foreground && r.settings.fail_open.unwrap_or(input.options.fail_open);
            let deferred = matches!(
                op,
                Op::Skip {
                    reason: SkipReason::CelTimeSpent
                }
            );
            if rank.is_some() && (deferred || ((foreground || !terminating) && !fail_open)) {
                held_in_rank.push(r.key.clone());
            }
        }
        steps.push(deletion_step(r, live, op));
    }
    resolve_fail_open(&mut steps, input.options.fail_open);
    Plan {
        steps,
        requeue: poll.then_some(input.options.readiness_poll),
    }
}

/// The operation deleting one resource: left (another Composition's, orphaned, disabled, a
/// Patch that does not delete, prune disabled), waiting on the deletion groups before it
/// (`held`: what those still hold, when it is ranked and live), or deleted.
fn deletion_op(
    r: &PreparedResource,
    live: Option<&Value>,
    settings: &Settings,
    (foreign, held): (bool, Option<&[ResourceKey]>),
    input: &PlanInput<'_>,
) -> Op {
    let foreground = settings.deletion_strategy == DeletionStrategy::Foreground;
    if foreign {
        Op::Skip {
            reason: SkipReason::OwnedElsewhere,
        }
    } else if input.composition.symphony_deleting() {
        // Eno: a Composition whose Symphony is deleted deletes nothing (reconciliation
        // controller, `symphony-deleting`), whatever the resource's own strategy says.
        Op::Skip {
            reason: SkipReason::Orphaned,
        }
    } else if settings.disable_reconciliation {
        Op::Skip {
            reason: SkipReason::ReconciliationDisabled,
        }
    } else if r.patch.is_some()
        && !patch_deletes(&patch_ops(&effective(r, live, input.composition).0))
    {
        // A Patch leaves its target on Composition deletion, unless (e.g. through an
        // override on `composition.metadata.deletionTimestamp`) it deletes it.
        Op::Skip {
            reason: SkipReason::PatchLeft,
        }
    } else if settings.deletion_strategy == DeletionStrategy::Orphan {
        Op::Skip {
            reason: SkipReason::Orphaned,
        }
    } else if settings.prune_disabled {
        Op::Skip {
            reason: SkipReason::PruneDisabled,
        }
    } else if let Some(held) = held.filter(|h| !h.is_empty()) {
        Op::Wait { on: held.to_vec() }
    } else {
        delete_op(live, foreground)
    }
}
