//! The `enoki` binary: parse the arguments, hand them to [`controller::run()`], and print a
//! failure as one line per cause (no backtrace) with exit code 1 (`enoki diff` also exits 1
//! when something would change).

use clap::Parser;

fn main() {
    match controller::run(&controller::cli::Args::parse()) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
            eprintln!("error: {}", chain.join(": "));
            std::process::exit(1);
        }
    }
}
