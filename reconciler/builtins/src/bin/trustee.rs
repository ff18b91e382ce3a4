//! The `trustee` built-in as a standalone synthesizer (`wasm32-wasip1`): the same code enoki links
//! natively.

fn main() {
    enoki_sdk::run(builtins::trustee::synthesize);
}
