//! The `enoki` binary: parse the arguments, hand them to [`controller::run()`], and print a
//! failure as one line per cause (no backtrace) with exit code 1.

use clap::Parser;

fn main() {
    if let Err(e) = controller::run(&controller::cli::Args::parse()) {
        let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
        eprintln!("error: {}", chain.join(": "));
        std::process::exit(1);
    }
}
