//! Test synthesizer for the e2e suites: emits exactly the items stored as a JSON list in
//! `data.items` of the ConfigMap bound under `config`, so a test controls the synthesis
//! output (annotations included) by editing one ConfigMap.

fn main() {
    enoki_sdk::run(|input| {
        let config = input.input("config")?;
        let text = config
            .pointer("/data/items")
            .and_then(|v| v.as_str())
            .unwrap_or("[]");
        let items: Vec<serde_json::Value> =
            serde_json::from_str(text).map_err(|e| enoki_sdk::Error::InvalidInput {
                key: "config".into(),
                message: format!("data.items: {e}"),
            })?;
        let mut out = enoki_sdk::Output::default();
        for item in items {
            out.push(item);
        }
        Ok(out)
    });
}
