//! The `enoki` binary: parse the arguments, hand them to [`controller::run`].

use clap::Parser;

fn main() -> anyhow::Result<()> {
    controller::run(&controller::cli::Args::parse())
}
