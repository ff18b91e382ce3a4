//! Sample 02 as a `wasi:cli/command` component:
//! `cargo build -p sample-02-rust-component --target wasm32-wasip2 --release`.

fn main() {
    enoki_sdk::run(component::synthesize);
}
