//! [`ConfigError`]: a configuration file that could not be used.

use std::fmt;

/// A configuration file that could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// Not TOML, an unknown key, or a value of the wrong type: the parser's
    /// message, with the line and column.
    Parse(String),
    /// A value out of its range.
    Invalid {
        /// The key, e.g. `balance.load_factor`.
        key: String,
        /// What it must be, e.g. `1.0 ..= 100.0`.
        expected: &'static str,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Parse(message) => write!(f, "invalid config file: {message}"),
            ConfigError::Invalid { key, expected } => {
                write!(f, "invalid config: `{key}` must be {expected}")
            }
        }
    }
}

impl std::error::Error for ConfigError {}
