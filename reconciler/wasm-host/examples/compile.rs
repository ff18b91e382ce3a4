//! Compiles one module with a chosen strategy and reports the time (a measuring tool for the
//! large-module benchmark; peak RSS is read from /proc by the caller).
//!
//! usage: compile <module.wasm> <cranelift|cranelift-seq|cranelift-o0|winch|winch-seq>
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let bytes = std::fs::read(&args[1])?;
    let mut config = wasmtime::Config::new();
    config.epoch_interruption(true);
    match args[2].as_str() {
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
    for tweak in args.iter().skip(3) {
        match tweak.as_str() {
            "no-address-map" => {
                config.generate_address_map(false);
            }
            "no-unwind" => {
                config.native_unwind_info(false);
            }
            "no-cow" => {
                config.memory_init_cow(false);
            }
            "no-backtrace" => {
                config.wasm_backtrace(false);
            }
            other => return Err(format!("unknown tweak {other}").into()),
        }
    }
    let engine = wasmtime::Engine::new(&config)?;
    let started = Instant::now();
    if std::env::var("VALIDATE_ONLY").is_ok() {
        wasmtime::Module::validate(&engine, &bytes)?;
    } else if std::env::var("PRECOMPILE_ONLY").is_ok() {
        let art = engine.precompile_module(&bytes)?;
        println!("artifact {} bytes", art.len());
    } else {
        let _m = wasmtime::Module::new(&engine, &bytes)?;
    }
    let module = ();
    let hwm = std::fs::read_to_string("/proc/self/status")?
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .unwrap_or_default()
        .to_string();
    println!(
        "{} {:?}: compiled {} bytes in {:?} ({hwm})",
        args[2],
        &args[3..],
        bytes.len(),
        started.elapsed(),
    );
    drop(module);
    Ok(())
}
