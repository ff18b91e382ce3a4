//! {{name}}: an enoki synthesizer (WASI preview1 module). `make build` builds it for
//! `wasm32-wasip1`; `make test` renders the fixture and compares it with the golden file.

use enoki_sdk::{Error, Input, Output, Resource};

/// Reads `config.data.greeting` (default "hello") and emits `<composition>-greeting`.
fn synthesize(input: &Input) -> Result<Output, Error> {
    let config = input.input("config")?;
    let greeting = config
        .pointer("/data/greeting")
        .and_then(|v| v.as_str())
        .unwrap_or("hello");
    let name = input.composition().name;
    let mut out = Output::default();
    out.push(
        Resource::new("v1", "ConfigMap", &format!("{name}-greeting"))
            .label("app.kubernetes.io/name", &name)
            .readiness_group(0)
            .readiness("has(self.data.message)")
            .set("/data/message", format!("{greeting}, world")),
    );
    Ok(out)
}

fn main() {
    enoki_sdk::run(synthesize);
}
