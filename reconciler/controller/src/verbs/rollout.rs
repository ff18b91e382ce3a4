//! `enoki rollout status|pause|resume|undo <synthesizer>`: a Synthesizer's rollout as its
//! `status.rollout` says, and the annotations that pause it and undo it (what a GitOps
//! repository may set as well). Acts with the caller's credentials.

use std::fmt::Write as _;

use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::cli::RolloutCommand;
use crds::Synthesizer;
use crds::names::rollout as names;

/// Runs one `enoki rollout` command; what it prints.
///
/// # Errors
/// The cluster cannot be reached, the Synthesizer does not exist or cannot be changed, or
/// (undo) there is no revision to go back to.
pub async fn rollout(cmd: &RolloutCommand) -> anyhow::Result<String> {
    let args = match cmd {
        RolloutCommand::Status(a)
        | RolloutCommand::Pause(a)
        | RolloutCommand::Resume(a)
        | RolloutCommand::Undo(a) => a,
    };
    let (client, _) = super::connect(&args.cluster).await?;
    let api: Api<Synthesizer> = Api::all(client);
    let synth = api
        .get_opt(&args.synthesizer)
        .await
        .map_err(|e| super::api_error(&format!("reading Synthesizer {}", args.synthesizer), e))?
        .ok_or_else(|| anyhow::anyhow!("Synthesizer {} does not exist", args.synthesizer))?;
    let rollout = synth.status.as_ref().and_then(|s| s.rollout.clone());
    let annotate = |value: serde_json::Value| async move {
        api.patch(
            &args.synthesizer,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": value}})),
        )
        .await
        .map_err(|e| super::api_error(&format!("annotating Synthesizer {}", args.synthesizer), e))
    };
    match cmd {
        RolloutCommand::Status(_) => Ok(status(&synth)),
        RolloutCommand::Pause(_) => {
            annotate(json!({names::PAUSED_ANNOTATION: "true"})).await?;
            Ok(format!(
                "synthesizer {}: rollout paused; no further wave starts until `enoki rollout \
                 resume`\n",
                args.synthesizer
            ))
        }
        RolloutCommand::Resume(_) => {
            annotate(json!({names::PAUSED_ANNOTATION: null})).await?;
            let mut out = format!("synthesizer {}: rollout resumed\n", args.synthesizer);
            if let Some(r) = rollout.filter(|r| r.phase == names::HALTED) {
                let _ = writeln!(
                    out,
                    "note: the rollout of revision {} is Halted ({}): it does not go on; \
                     change the Synthesizer (a new revision) or `enoki rollout undo`",
                    r.revision.number,
                    r.reason.unwrap_or_default()
                );
            }
            Ok(out)
        }
        RolloutCommand::Undo(_) => {
            let Some(r) = rollout else {
                anyhow::bail!("Synthesizer {} has no revisions yet", args.synthesizer);
            };
            let Some(stable) = r.stable else {
                anyhow::bail!(
                    "Synthesizer {}: revision {} is its first; there is no revision to go back to",
                    args.synthesizer,
                    r.revision.number
                );
            };
            annotate(json!({names::UNDO_ANNOTATION: r.revision.number.to_string()})).await?;
            Ok(format!(
                "synthesizer {}: revision {} undone; every Composition goes back to revision {}\n",
                args.synthesizer, r.revision.number, stable.number
            ))
        }
    }
}

/// The rollout as text.
fn status(synth: &Synthesizer) -> String {
    let name = synth.metadata.name.clone().unwrap_or_default();
    let Some(r) = synth.status.as_ref().and_then(|s| s.rollout.as_ref()) else {
        return format!(
            "Synthesizer {name}: no revision yet (its module has not compiled, or the \
             controller has not seen it)\n"
        );
    };
    let mut out = String::new();
    let _ = writeln!(out, "Synthesizer:  {name}");
    let _ = writeln!(
        out,
        "Revision:     {} ({}, module {})",
        r.revision.number, r.revision.name, r.revision.module_digest
    );
    let stable = r
        .stable
        .as_ref()
        .map_or("none".into(), |s| s.number.to_string());
    let _ = writeln!(out, "Stable:       {stable}");
    let strategy = serde_json::to_value(r.strategy).unwrap_or_default();
    let _ = writeln!(
        out,
        "Strategy:     {}",
        strategy.as_str().unwrap_or_default()
    );
    let paused = synth
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::PAUSED_ANNOTATION))
        .is_some_and(|v| v == "true");
    let _ = writeln!(
        out,
        "Phase:        {}{}{}",
        r.phase,
        r.reason
            .as_deref()
            .map(|x| format!(" ({x})"))
            .unwrap_or_default(),
        if paused { ", paused by annotation" } else { "" }
    );
    let _ = writeln!(out, "Wave:         {} ({} admitted)", r.wave, r.admitted);
    let _ = writeln!(
        out,
        "Compositions: {} updated, {} ready, {} failed, {} total",
        r.updated, r.ready, r.failed, r.total
    );
    let per: Vec<String> = r
        .revisions
        .iter()
        .map(|c| format!("{}: {} ({} ready)", c.number, c.compositions, c.ready))
        .collect();
    let _ = writeln!(out, "Revisions:    {}", per.join(", "));
    if let Some(m) = &r.message {
        let _ = writeln!(out, "Message:      {m}");
    }
    out
}
