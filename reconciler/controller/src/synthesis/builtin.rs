//! Built-in synthesizers (native code linked into the binary), run under their Synthesizer's
//! deadline and output bound.

use wasm_host::{HostError, RunLimits};

use super::error::SynthesisError;

/// A built-in synthesizer function.
pub type BuiltinFn = fn(&enoki_sdk::Input) -> Result<enoki_sdk::Output, enoki_sdk::Error>;

/// Runs a built-in on a thread of its own under the Synthesizer's deadline and output bound
/// (a built-in is native code: one past its deadline is left to finish on its own thread and
/// its result dropped; the synthesis fails with `Timeout` at the deadline).
pub(super) fn run(
    run: BuiltinFn,
    stdin: &[u8],
    limits: RunLimits,
) -> Result<Vec<u8>, SynthesisError> {
    use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
    /// Built-in runs past their deadline whose threads still run.
    static OVERDUE: AtomicUsize = AtomicUsize::new(0);
    /// While this many are, no built-in starts (their threads are held to no budget).
    const MAX_OVERDUE: usize = 4;
    const RUNNING: u8 = 0;
    const DONE: u8 = 1;
    const ABANDONED: u8 = 2;
    if OVERDUE.load(Ordering::SeqCst) >= MAX_OVERDUE {
        return Err(SynthesisError::Host(HostError::Engine {
            message: format!(
                "{MAX_OVERDUE} built-in runs past their deadline still run; none starts until \
                 one ends"
            ),
        }));
    }
    let parsed: enoki_sdk::Input =
        serde_json::from_slice(stdin).map_err(|e| SynthesisError::MalformedOutput {
            message: e.to_string(),
        })?;
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let state = std::sync::Arc::new(AtomicU8::new(RUNNING));
    let theirs = state.clone();
    std::thread::Builder::new()
        .name("enoki-builtin".into())
        .spawn(move || {
            let _ = tx.send(enoki_sdk::testing::run(run, &parsed));
            let finished =
                theirs.compare_exchange(RUNNING, DONE, Ordering::SeqCst, Ordering::SeqCst);
            if finished == Err(ABANDONED) {
                OVERDUE.fetch_sub(1, Ordering::SeqCst);
            }
        })
        .map_err(|e| {
            SynthesisError::Host(HostError::Engine {
                message: format!("starting the built-in: {e}"),
            })
        })?;
    let list = match rx.recv_timeout(limits.deadline) {
        Ok(list) => list,
        // Past the deadline: left to end on its thread, counted until it does (unless it
        // ended in between, its result then in the channel).
        Err(_) => {
            // Counted before it is marked, so the thread's decrement never comes first.
            OVERDUE.fetch_add(1, Ordering::SeqCst);
            match state.compare_exchange(RUNNING, ABANDONED, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => {
                    return Err(SynthesisError::Host(HostError::Timeout {
                        after: limits.deadline,
                    }));
                }
                Err(_) => {
                    OVERDUE.fetch_sub(1, Ordering::SeqCst);
                    rx.try_recv().map_err(|_| {
                        SynthesisError::Host(HostError::Timeout {
                            after: limits.deadline,
                        })
                    })?
                }
            }
        }
    };
    let out = serde_json::to_vec(&list).map_err(|e| SynthesisError::MalformedOutput {
        message: e.to_string(),
    })?;
    if out.len() >= limits.max_output_bytes {
        return Err(SynthesisError::Host(HostError::OutputTooLarge {
            limit: limits.max_output_bytes,
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use std::time::Duration;

    const STDIN: &[u8] =
        br#"{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[]}"#;

    fn slow(_: &enoki_sdk::Input) -> Result<enoki_sdk::Output, enoki_sdk::Error> {
        std::thread::sleep(Duration::from_secs(5));
        Ok(enoki_sdk::Output::default())
    }

    fn wide(_: &enoki_sdk::Input) -> Result<enoki_sdk::Output, enoki_sdk::Error> {
        let mut out = enoki_sdk::Output::default();
        out.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "wide"}, "data": {"pad": "x".repeat(4096)}}));
        Ok(out)
    }

    fn limits(deadline: Duration, output: usize) -> RunLimits {
        RunLimits {
            deadline,
            max_output_bytes: output,
            ..RunLimits::default()
        }
    }

    #[test]
    fn a_built_in_past_its_deadline_or_over_its_output_bound_fails_its_synthesis() {
        let started = std::time::Instant::now();
        match run(slow, STDIN, limits(Duration::from_millis(50), 1 << 20)) {
            Err(SynthesisError::Host(HostError::Timeout { .. })) => {}
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(2), "not waited out");
        match run(wide, STDIN, limits(Duration::from_secs(5), 1024)) {
            Err(SynthesisError::Host(HostError::OutputTooLarge { limit: 1024 })) => {}
            other => panic!("{other:?}"),
        }
        assert!(run(wide, STDIN, limits(Duration::from_secs(5), 1 << 20)).is_ok());
    }
}
