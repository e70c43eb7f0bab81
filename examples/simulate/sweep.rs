//! `--sweep` (written later).
use crate::args::Config;
use crate::workload::Workload;

pub fn run(_config: &Config, _workload: &Workload) {}
