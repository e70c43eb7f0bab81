//! The `gateway` binary's flags: read by clap (`args/flags.rs`) into
//! [`Args`] (`args/parsed.rs`), a `--config` file's settings under them
//! (`args/file.rs`).

use crate::cli::Stop;

pub use parsed::Args;
pub use trust::Trust;
pub use usage::USAGE;

/// Why a command line without backends is refused, and what to give.
const NO_BACKENDS: &str =
    "no backends: give --backend URL (repeatable), or --etcd URL --prefix P; \
simulated ones to try the gateway with: `sims` (cargo run -p tower-model-balance-sim --bin sims) \
prints a --backend value for each";

impl Args {
    /// The flags in `args` (the program's name left out); with
    /// `--config FILE`, the file's settings under them (`args/file.rs`).
    ///
    /// # Errors
    ///
    /// `--help`, or a bad flag (the message names it), or a bad file (the
    /// message names it and its key), or no backends: neither `--backend`
    /// nor `--etcd`, on the command line or in the file.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, Stop> {
        let args = file::parse(args.into_iter().collect())?;
        if args.backends.is_empty() && args.etcd.is_empty() {
            return Err(Stop::Error(NO_BACKENDS.into()));
        }
        Ok(args)
    }
}

mod config;
mod file;
mod flags;
mod parsed;
#[cfg(test)]
mod tests;
mod trust;
mod usage;
