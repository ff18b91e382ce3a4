//! Sample 01 as a WASI command: `cargo build -p sample-01-hello-rust --target wasm32-wasip1 --release`.

fn main() {
    enoki_sdk::run(hello::synthesize);
}
