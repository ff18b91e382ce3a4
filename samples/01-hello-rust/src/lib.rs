//! Sample 01: reads the ConfigMap bound under `config` and emits three resources in two
//! readiness groups. The synthesis function is a library so it can be tested natively and
//! benchmarked against its wasm build.

use enoki_sdk::{Error, Input, Output, Resource};

/// The synthesizer: `config.data.greeting` (default "hello") and `config.data.extra` (extra
/// ConfigMaps to emit, default 0; used by the benchmark).
///
/// # Errors
/// When the `config` input is not bound.
pub fn synthesize(input: &Input) -> Result<Output, Error> {
    let config = input.input("config")?;
    let greeting = config
        .pointer("/data/greeting")
        .and_then(|v| v.as_str())
        .unwrap_or("hello");
    let extra: usize = config
        .pointer("/data/extra")
        .and_then(|v| v.as_str())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let name = input.composition().name;
    let name = if name.is_empty() {
        "hello".to_string()
    } else {
        name
    };

    let mut out = Output::default();
    out.push(
        Resource::new("v1", "ConfigMap", &format!("{name}-settings"))
            .label("app.kubernetes.io/name", &name)
            .readiness_group(0)
            .readiness("has(self.data) && self.data.greeting != ''")
            .set("/data/greeting", greeting),
    );
    out.push(
        Resource::new("v1", "ConfigMap", &format!("{name}-message"))
            .label("app.kubernetes.io/name", &name)
            .readiness_group(1)
            .set("/data/message", format!("{greeting}, world")),
    );
    out.push(
        Resource::new("v1", "ServiceAccount", &name)
            .label("app.kubernetes.io/name", &name)
            .readiness_group(1),
    );
    for i in 0..extra {
        out.push(
            Resource::new("v1", "ConfigMap", &format!("{name}-extra-{i}"))
                .readiness_group(1)
                .set("/data/index", i.to_string()),
        );
    }
    out.info(format!("greeting {greeting:?}"));
    Ok(out)
}
