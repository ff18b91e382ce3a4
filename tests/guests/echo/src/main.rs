//! Test synthesizer for the e2e suites: emits exactly the items stored as a JSON list in
//! `data.items` of the ConfigMap bound under `config`, so a test controls the synthesis
//! output (annotations included) by editing one ConfigMap; `data.pad` pads the last item
//! with that many bytes; `data.copies` emits every item that many times; `data.clones` adds
//! that many minimal ConfigMaps; `data.raw`, when set, is written to stdout verbatim instead (tests
//! of malformed output). `data.mirror`, when set, adds a ConfigMap of that name whose data are the
//! observed outputs it was given (tests that a module never sees what it may not read);
//! `data.env-mirror` adds a ConfigMap of that name holding the Eno environment variables (and
//! those named, comma-separated, in `data.env-vars`). In
//! instance mode (no `config` bound) it reads the instance, `self`.

fn main() {
    enoki_sdk::run(|input| {
        let config = input.input("config").or_else(|_| input.input("self"))?;
        if let Some(raw) = config.pointer("/data/raw").and_then(|v| v.as_str()) {
            use std::io::Write;
            let mut out = std::io::stdout();
            let _ = out.write_all(raw.as_bytes());
            let _ = out.flush();
            std::process::exit(0);
        }
        let text = config
            .pointer("/data/items")
            .and_then(|v| v.as_str())
            .unwrap_or("[]");
        let items: Vec<serde_json::Value> =
            serde_json::from_str(text).map_err(|e| enoki_sdk::Error::InvalidInput {
                key: "config".into(),
                message: format!("data.items: {e}"),
            })?;
        // `data.pad`: that many bytes of padding in the last item (tests of oversized output).
        let pad: usize = config
            .pointer("/data/pad")
            .and_then(|v| v.as_str())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut out = enoki_sdk::Output::default();
        if let Some(mirror) = config.pointer("/data/mirror").and_then(|v| v.as_str()) {
            let mut data = serde_json::Map::new();
            for o in input.observed() {
                let key = format!(
                    "{}.{}",
                    o.pointer("/kind")
                        .and_then(|v| v.as_str())
                        .unwrap_or_default(),
                    o.pointer("/metadata/name")
                        .and_then(|v| v.as_str())
                        .unwrap_or_default()
                );
                data.insert(key, serde_json::Value::String(o.to_string()));
            }
            out.push(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": mirror}, "data": data}));
        }
        if let Some(name) = config.pointer("/data/env-mirror").and_then(|v| v.as_str()) {
            let mut data = serde_json::Map::new();
            // `data.env-vars`: more variables to mirror, comma-separated.
            let extra = config
                .pointer("/data/env-vars")
                .and_then(|v| v.as_str())
                .unwrap_or_default();
            for var in [
                "COMPOSITION_NAME",
                "COMPOSITION_NAMESPACE",
                "SYNTHESIS_UUID",
            ]
            .into_iter()
            .chain(extra.split(',').filter(|v| !v.is_empty()))
            {
                data.insert(var.into(), std::env::var(var).unwrap_or_default().into());
            }
            out.push(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name}, "data": data}));
        }
        // `data.clones`: that many minimal ConfigMaps `clone-<i>` (tests of huge outputs).
        let clones: usize = config
            .pointer("/data/clones")
            .and_then(|v| v.as_str())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if clones > 0 {
            // Written as it goes: the guest holds none of them.
            use std::io::Write;
            let mut w = std::io::BufWriter::new(std::io::stdout());
            let _ = w.write_all(b"{\"apiVersion\":\"config.kubernetes.io/v1\",\"kind\":\"ResourceList\",\"items\":[");
            for i in 0..clones {
                let sep = if i == 0 { "" } else { "," };
                let _ = write!(
                    w,
                    "{sep}{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"clone-{i}\"}}}}"
                );
            }
            let _ = w.write_all(b"]}");
            let _ = w.flush();
            std::process::exit(0);
        }
        let mut items = items;
        version_switches(config, &mut items)?;
        let last = items.len().saturating_sub(1);
        // `data.copies`: every item that many times, named `<name>-<i>` (large outputs from a
        // small input).
        let copies: usize = config
            .pointer("/data/copies")
            .and_then(|v| v.as_str())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        for (i, mut item) in items.into_iter().enumerate() {
            if i == last && pad > 0 {
                item["data"]["pad"] = serde_json::Value::String("x".repeat(pad));
            }
            if copies == 0 {
                out.push(item);
                continue;
            }
            let name = item
                .pointer("/metadata/name")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string();
            for c in 0..copies {
                let mut copy = item.clone();
                copy["metadata"]["name"] = serde_json::Value::String(format!("{name}-{c}"));
                out.push(copy);
            }
        }
        Ok(out)
    });
}

/// What a new version of the synthesizer (its Synthesizer's `env`) changes, for rollout
/// tests: `ECHO_FAIL_IF=<key>` fails the synthesis when the bound ConfigMap has `data.<key>`
/// (a version that fails for some inputs); `ECHO_EMPTY_IF=<key>` emits nothing for such an
/// input (a version whose output enoki refuses); `ECHO_NEVER_READY=1` gives every item a
/// readiness check that never passes (a version that synthesizes but never becomes Ready).
fn version_switches(
    config: &serde_json::Value,
    items: &mut Vec<serde_json::Value>,
) -> Result<(), enoki_sdk::Error> {
    if let Ok(key) = std::env::var("ECHO_EMPTY_IF")
        && config.pointer(&format!("/data/{key}")).is_some()
    {
        items.clear();
    }
    if let Ok(key) = std::env::var("ECHO_FAIL_IF")
        && config.pointer(&format!("/data/{key}")).is_some()
    {
        return Err(enoki_sdk::Error::InvalidInput {
            key: "config".into(),
            message: format!("this version refuses inputs with data.{key}"),
        });
    }
    if std::env::var("ECHO_NEVER_READY").is_ok_and(|v| v == "1") {
        for item in items.iter_mut() {
            item["metadata"]["annotations"]["enoki.dev/readiness"] = "false".into();
        }
    }
    Ok(())
}
