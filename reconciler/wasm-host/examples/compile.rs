//! Compiles one module with a chosen wasmtime strategy and prints the time and this
//! process's peak RSS: the tool behind the large-module figures in docs/benchmarks.md.
//!
//! usage: `compile <module.wasm> <cranelift|cranelift-seq|cranelift-o0|winch|winch-seq>
//! [no-address-map] [no-unwind]`

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(strategy)) = (args.get(1), args.get(2)) else {
        return Err("usage: compile <module.wasm> <strategy> [tweaks…]".into());
    };
    let bytes = std::fs::read(path)?;
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(true);
    match strategy.as_str() {
        "cranelift" => {}
        "cranelift-seq" => {
            config.parallel_compilation(false);
        }
        "cranelift-o0" => {
            config.cranelift_opt_level(wasmtime::OptLevel::None);
        }
        "winch" => {
            config.strategy(wasmtime::Strategy::Winch);
        }
        "winch-seq" => {
            config.strategy(wasmtime::Strategy::Winch);
            config.parallel_compilation(false);
        }
        other => return Err(format!("unknown strategy {other}").into()),
    }
    for tweak in &args[3..] {
        match tweak.as_str() {
            "no-address-map" => {
                config.generate_address_map(false);
            }
            "no-unwind" => {
                config.native_unwind_info(false);
            }
            "opt-none" => {
                config.cranelift_opt_level(wasmtime::OptLevel::None);
            }
            "single-pass" => {
                config.cranelift_regalloc_algorithm(wasmtime::RegallocAlgorithm::SinglePass);
            }
            other => return Err(format!("unknown tweak {other}").into()),
        }
    }
    let engine = wasmtime::Engine::new(&config)?;
    let started = Instant::now();
    let module = wasmtime::Module::new(&engine, &bytes)?;
    let elapsed = started.elapsed();
    let artifact = module.serialize()?.len();
    let peak = std::fs::read_to_string("/proc/self/status")?
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .map(|l| l.trim_start_matches("VmHWM:").trim().to_string())
        .unwrap_or_default();
    println!(
        "{strategy} {:?}: compiled {} bytes in {elapsed:?}; artifact {artifact} bytes; peak RSS {peak}",
        &args[3..],
        bytes.len(),
    );
    Ok(())
}
