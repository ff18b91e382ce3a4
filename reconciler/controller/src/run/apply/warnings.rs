//! The Warning Events of a pass: a note per reason, published when it says something new,
//! bounded whatever the Composition's resources report.

use crds::Composition;

use crate::run::Context;

/// Annotation values that did not parse (read as Eno reads them) become a Warning Event.
pub(super) async fn report_warnings(
    ctx: &Context,
    comp: &Composition,
    uid: &str,
    prepared: &plan::Prepared,
) {
    let warnings: Vec<String> = prepared
        .resources
        .iter()
        .flat_map(|r| r.settings.warnings.iter().cloned())
        .collect();
    let reason = crds::names::reasons::INVALID_ANNOTATION;
    warn_once(ctx, comp, uid, reason, "Plan", &warnings).await;
}

/// Publishes `notes` as one Warning Event with `reason`, unless the last one of that reason
/// said the same (a conflict or a failing write is not re-announced on every pass); nothing
/// to say resets it.
pub(super) async fn warn_once(
    ctx: &Context,
    comp: &Composition,
    uid: &str,
    reason: &'static str,
    action: &str,
    notes: &[String],
) {
    let note = bounded_note(notes);
    let changed = ctx.state.memory.reports(uid, |m| {
        if note.is_empty() {
            m.reported.remove(reason);
            return false;
        }
        m.reported.insert(reason, note.clone()).as_deref() != Some(note.as_str())
    });
    if changed {
        ctx.report.event(comp, true, reason, action, note).await;
    }
}

/// Most bytes of a note kept per Composition and reason (and sent as an Event, which the API
/// server's own limit would cut further).
const MAX_NOTE: usize = 4096;

/// `notes` joined, at most [`MAX_NOTE`] bytes, saying how many were left out: what a
/// Composition's resources report costs the same whatever they emit. Pure.
fn bounded_note(notes: &[String]) -> String {
    let mut note = String::new();
    for (i, n) in notes.iter().enumerate() {
        let sep = if note.is_empty() { "" } else { "; " };
        if note.len() + sep.len() + n.len() > MAX_NOTE {
            let mut left = notes.len() - i;
            if note.is_empty() {
                note.push_str(&n[..n.floor_char_boundary(MAX_NOTE)]);
                note.push('…');
                left -= 1;
            }
            if left > 0 {
                note.push_str(&format!("; and {left} more"));
            }
            break;
        }
        note.push_str(sep);
        note.push_str(n);
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_is_bounded_whatever_the_resources_report() {
        let many: Vec<String> = (0..10_000)
            .map(|i| format!("ConfigMap/ns/x{i}: bad"))
            .collect();
        let note = bounded_note(&many);
        assert!(note.len() <= MAX_NOTE + 32, "{} bytes", note.len());
        assert!(note.ends_with(" more"), "{note}");
        let huge = vec!["é".repeat(MAX_NOTE)];
        let note = bounded_note(&huge);
        assert!(
            note.len() <= MAX_NOTE + 3 && note.ends_with('…'),
            "{} bytes",
            note.len()
        );
        let few = vec!["a".to_string(), "b".to_string()];
        assert_eq!(bounded_note(&few), "a; b");
    }
}
