//! Printing a [`View`]: text (colour only on a terminal), JSON, Graphviz `dot`, and SVG through
//! Graphviz's `dot` program.

use std::fmt::Write as _;

use super::{Resource, State, View};

/// `s` without control characters (a message from a synthesizer or the API server must not
/// drive the terminal).
pub fn clean(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// The text of `enoki status`: the Composition, its conditions, the next synthesis, then each
/// readiness group with its resources. `color`: ANSI colours (only for a terminal).
pub fn text(v: &View, color: bool) -> String {
    let paint = |code: &str, s: &str| {
        if color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Composition {}/{} (synthesizer {}): {}",
        v.namespace,
        v.name,
        v.synthesizer,
        if v.ready {
            paint("32", "Ready")
        } else {
            paint("33", "not Ready")
        }
    );
    for c in &v.conditions {
        let _ = writeln!(
            out,
            "  {}={} {}: {}",
            clean(&c.type_),
            clean(c.status.as_str()),
            clean(&c.reason),
            clean(&c.message)
        );
    }
    match (&v.synthesis, &v.synthesized) {
        (Some(uuid), Some(at)) => {
            let _ = writeln!(out, "  current synthesis {uuid} (synthesized {at})");
        }
        (Some(uuid), None) => {
            let _ = writeln!(out, "  current synthesis {uuid}");
        }
        _ => {
            let _ = writeln!(out, "  no synthesis yet");
        }
    }
    let next = match (&v.next.reason, &v.next.message) {
        (Some(r), Some(m)) => format!("{}: {r}: {m}", v.next.state),
        (None, Some(m)) => format!("{}: {m}", v.next.state),
        _ => v.next.state.clone(),
    };
    let next = clean(&next);
    let next = if v.next.state == "blocked" {
        paint("33", &next)
    } else {
        next
    };
    let _ = writeln!(out, "  next synthesis: {next}");
    if let Some(r) = &v.revision {
        let _ = writeln!(out, "  synthesizer {}", clean(r));
    }
    if let Some(note) = &v.note {
        let _ = writeln!(out, "  {}", clean(note));
    }
    resources(&mut out, v, &paint);
    out
}

/// The resources by readiness group, each with its state's mark (painted by `paint`).
fn resources(out: &mut String, v: &View, paint: &dyn Fn(&str, &str) -> String) {
    let width = v
        .resources
        .iter()
        .map(|r| r.label().len())
        .max()
        .unwrap_or(0);
    let mut group = None;
    for r in &v.resources {
        if group != Some(r.group) {
            group = Some(r.group);
            let _ = writeln!(out, "group {}", r.group);
        }
        let (mark, code) = match r.state {
            State::Ready => ("✔", "32"),
            State::Waiting { .. } => ("…", "33"),
            State::Failed { .. } | State::Unreadable { .. } => ("✘", "31"),
            State::Deferred { .. } | State::Pending => ("○", "90"),
            State::Deleting => ("−", "35"),
        };
        let _ = writeln!(
            out,
            "  {} {:width$}  {}",
            paint(code, mark),
            clean(&r.label()),
            clean(&describe(r))
        );
    }
}

/// The state of one resource in words.
pub fn describe(r: &Resource) -> String {
    match &r.state {
        State::Ready => "ready".into(),
        State::Waiting { unsatisfied } => format!("waiting on {}", unsatisfied.join("; ")),
        State::Failed { reason } => format!("failed: {reason}"),
        State::Deferred { waits_on } => format!("deferred: group {waits_on} is not ready"),
        State::Unreadable { reason } => format!("unreadable: {reason}"),
        State::Pending => "pending: not applied yet".into(),
        State::Deleting => "deleting: no longer emitted".into(),
    }
}

/// The view as JSON (pretty).
///
/// # Errors
/// Serialization failure (not expected).
pub fn json(v: &View) -> anyhow::Result<String> {
    Ok(serde_json::to_string_pretty(v)? + "\n")
}

/// Fill colour of a state in the graph.
fn fill(state: &State) -> &'static str {
    match state {
        State::Ready => "#b7e1a1",
        State::Waiting { .. } => "#ffe08a",
        State::Failed { .. } => "#f4a6a6",
        State::Deferred { .. } => "#dddddd",
        State::Unreadable { .. } => "#f4a6a6",
        State::Pending => "#cfe2ff",
        State::Deleting => "#e0c3fc",
    }
}

/// A Graphviz string literal.
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The readiness-group DAG as Graphviz `dot`: a cluster per group, a node per resource
/// coloured by state, an edge from each group to the next (every resource of a group waits on
/// every resource of the one before).
pub fn dot(v: &View) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "digraph {} {{\n  rankdir=LR; compound=true;\n  label={}; labelloc=t;\n  node [shape=box, style=\"rounded,filled\", fontname=\"sans-serif\", fontsize=10];",
        quoted(&format!("{}/{}", v.namespace, v.name)),
        quoted(&format!(
            "{}/{}: {} — next synthesis: {}",
            v.namespace,
            v.name,
            if v.ready { "Ready" } else { "not Ready" },
            v.next.state
        ))
    );
    let mut groups: Vec<(i64, Vec<usize>)> = Vec::new();
    for (i, r) in v.resources.iter().enumerate() {
        match groups.last_mut() {
            Some((g, members)) if *g == r.group => members.push(i),
            _ => groups.push((r.group, vec![i])),
        }
    }
    for (g, members) in &groups {
        let _ = writeln!(
            out,
            "  subgraph {} {{\n    label={};",
            quoted(&format!("cluster_{g}")),
            quoted(&format!("group {g}"))
        );
        for i in members {
            let r = &v.resources[*i];
            let mut detail = describe(r);
            if detail.len() > 60 {
                let mut cut = 60;
                while !detail.is_char_boundary(cut) {
                    cut -= 1;
                }
                detail.truncate(cut);
                detail.push('…');
            }
            let _ = writeln!(
                out,
                "    r{i} [label={}, fillcolor={}, tooltip={}];",
                quoted(&format!("{}\n{}\n{}", r.kind, r.name, detail)),
                quoted(fill(&r.state)),
                quoted(&describe(r))
            );
        }
        let _ = writeln!(out, "  }}");
    }
    for pair in groups.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let _ = writeln!(
            out,
            "  r{} -> r{} [ltail={}, lhead={}];",
            a.1[0],
            b.1[0],
            quoted(&format!("cluster_{}", a.0)),
            quoted(&format!("cluster_{}", b.0))
        );
    }
    out.push_str("}\n");
    out
}

/// Renders `dot` text to an SVG file with Graphviz's `dot` program.
///
/// # Errors
/// `dot` is not installed (the message says how to get it) or fails.
pub fn svg(dot_text: &str, path: &std::path::Path) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut child = std::process::Command::new("dot")
        .args(["-Tsvg", "-o"])
        .arg(path)
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| {
            anyhow::anyhow!(
                "--svg needs Graphviz's `dot` program ({e}); install graphviz (Debian: apt-get install graphviz), or use -o dot"
            )
        })?;
    child
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("dot: no stdin"))?
        .write_all(dot_text.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        anyhow::bail!("dot failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}
