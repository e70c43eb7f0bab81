//! `--svg`: the chart (written later).
use std::path::Path;

use crate::scenario::{ChurnRow, StrategyRow};

pub fn write(_path: &Path, _s: &[StrategyRow], _c: &[ChurnRow]) -> Result<(), String> {
    Ok(())
}
