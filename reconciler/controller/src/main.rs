//! The `enoki` binary: parse the arguments, hand them to [`controller::run()`], and print a
//! failure as one line per cause (no backtrace) with exit code 1 (`enoki diff`: 2, and 1
//! when something would change). Started as `enoki __compile-module`, it is one of the
//! controller's compile processes (`wasm_host::compile_child_main`).

use clap::Parser;

fn main() {
    // `enoki __compile-module ...`: a compile child of the controller (never typed by users).
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args
        .get(1)
        .is_some_and(|a| a == wasm_host::COMPILE_SUBCOMMAND)
    {
        std::process::exit(wasm_host::compile_child_main(&args[2..]));
    }
    controller::compile_in_child_processes();
    match controller::run(&controller::cli::Args::parse()) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
            eprintln!("error: {}", chain.join(": "));
            std::process::exit(1);
        }
    }
}
