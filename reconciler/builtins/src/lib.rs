//! Built-in synthesizers (trustee, quota, lepton), written against the synthesizer SDK only so
//! each also builds to `wasm32-wasip1`. Its contents arrive with the built-ins issue.
