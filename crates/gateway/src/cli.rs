//! What the binaries' command lines share: why parsing stopped, the
//! checks of a number, an `http://` origin, an etcd client URL and a key
//! prefix (each error naming its flag), clap's errors in the same words,
//! the usage on `--help` or a bad flag, the warnings on stderr, `say!`
//! and `note!`.

use std::process::ExitCode;

use tower_model_balance::endpoint::Origin;

/// `println!` that ignores a closed stdout (`gateway | head -1`) instead
/// of panicking: the program keeps serving whoever reads its output.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// `eprintln!` that ignores a closed stderr: the gateway's own messages
/// (its addresses, the drain, the exit summary), apart from the access
/// log on stdout.
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// Why parsing stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// `-h` or `--help`: print the usage, exit 0.
    Help,
    /// `-V` or `--version`: print the program's name and version, exit 0.
    Version,
    /// A bad flag, with the message that names it: exit 2.
    Error(String),
}

/// The flags `parse` reads from the command line, or the exit code: 0
/// after the usage for `--help`, 2 after the error and the usage for a
/// bad flag.
///
/// # Errors
///
/// The exit code, when the program stops here.
pub fn parse_or_exit<T>(
    parse: impl FnOnce(std::env::Args) -> Result<T, Stop>,
    usage: &str,
) -> Result<T, ExitCode> {
    let mut args = std::env::args();
    args.next();
    match parse(args) {
        Ok(parsed) => Ok(parsed),
        Err(Stop::Help) => {
            say!("{usage}");
            Err(ExitCode::SUCCESS)
        }
        Err(Stop::Version) => {
            let program = usage
                .strip_prefix("usage: ")
                .and_then(|u| u.split_whitespace().next())
                .unwrap_or("tower-model-balance-gateway");
            say!("{program} {}", env!("CARGO_PKG_VERSION"));
            Err(ExitCode::SUCCESS)
        }
        Err(Stop::Error(message)) => {
            eprintln!("error: {message}\n\n{usage}");
            Err(ExitCode::from(2))
        }
    }
}

/// A check's error as a clap value parser returns it: its message.
pub fn message(stop: Stop) -> String {
    match stop {
        Stop::Error(message) => message,
        Stop::Help | Stop::Version => String::new(),
    }
}

/// clap's error in the binaries' words: the message of a value's check,
/// `FLAG needs a value`, `FLAG given twice`, `unknown flag`; `--help`
/// and `--version` as [`Stop::Help`] and [`Stop::Version`].
pub fn clap_error(error: clap::Error) -> Stop {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let context = |kind| match error.get(kind) {
        Some(ContextValue::String(s)) => s.clone(),
        Some(ContextValue::Strings(s)) => s.join(", "),
        _ => String::new(),
    };
    // `--listen <ADDR>`: the flag alone.
    let arg = context(ContextKind::InvalidArg);
    let flag = arg.split_whitespace().next().unwrap_or_default().to_owned();
    match error.kind() {
        ErrorKind::DisplayHelp => return Stop::Help,
        ErrorKind::DisplayVersion => return Stop::Version,
        ErrorKind::ValueValidation => {
            if let Some(source) = std::error::Error::source(&error) {
                return Stop::Error(source.to_string());
            }
        }
        ErrorKind::InvalidValue if context(ContextKind::InvalidValue).is_empty() => {
            return Stop::Error(format!("{flag} needs a value"));
        }
        // No flags conflict but a flag with itself.
        ErrorKind::ArgumentConflict => return Stop::Error(format!("{flag} given twice")),
        ErrorKind::UnknownArgument => {
            let hint = match context(ContextKind::SuggestedArg) {
                hint if hint.is_empty() => String::new(),
                hint => format!(" (did you mean {hint}?)"),
            };
            return Stop::Error(format!("unknown flag `{arg}`{hint}"));
        }
        _ => {}
    }
    let text = error.render().to_string();
    let text = text.lines().next().unwrap_or_default();
    Stop::Error(text.trim_start_matches("error: ").to_owned())
}

/// The crate's warnings (a backend discovery ignored, a probe or a load
/// failing) on stderr, at the level `RUST_LOG` sets (default `warn`;
/// `RUST_LOG=tower_model_balance=debug` for more).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// `text` as a whole number in `min..=max`.
///
/// # Errors
///
/// It is not one: the message names `flag`.
pub fn number(text: &str, flag: &str, min: usize, max: usize) -> Result<usize, Stop> {
    match text.parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(Stop::Error(format!(
            "{flag}: `{text}` is not a whole number in {min}..={max}"
        ))),
    }
}

/// An `http://` or `https://` origin (the gateway's backends).
///
/// # Errors
///
/// Not an origin: the message names `flag`.
pub fn origin(flag: &str, text: &str) -> Result<Origin, Stop> {
    Origin::parse(text).map_err(|e| Stop::Error(format!("{flag} `{text}`: {e}")))
}

/// A plain `http://host[:port]` origin (the bare proxy's and the
/// sidecar's clients have no TLS).
///
/// # Errors
///
/// Not an origin, or not `http://`: the message names `flag`.
pub fn http_origin(flag: &str, text: &str) -> Result<Origin, Stop> {
    let origin = Origin::parse(text).map_err(|e| Stop::Error(format!("{flag} `{text}`: {e}")))?;
    if origin.scheme() != &http::uri::Scheme::HTTP {
        return Err(Stop::Error(format!(
            "{flag} `{text}`: only http:// (this program's client has no TLS)"
        )));
    }
    Ok(origin)
}

/// An etcd client URL (`--etcd`): `http://host:port` or
/// `https://host:port`, etcd's port (2379 by default) written out, as the
/// client takes it.
///
/// # Errors
///
/// Not such a URL: the message says why.
pub fn etcd_url(text: &str) -> Result<Origin, Stop> {
    let origin = origin("--etcd", text)?;
    if origin.authority().port_u16().is_none() {
        return Err(Stop::Error(format!(
            "--etcd `{text}`: give the port (etcd's client port is 2379 by default)"
        )));
    }
    Ok(origin)
}

/// A key prefix in etcd (`--prefix`): one byte or more, no control
/// characters.
///
/// # Errors
///
/// It is not one.
pub fn key_prefix(text: &str) -> Result<(), Stop> {
    if text.is_empty() || text.chars().any(char::is_control) {
        return Err(Stop::Error(format!(
            "--prefix: `{}` is not a key prefix (1 byte or more, no control characters)",
            text.escape_debug()
        )));
    }
    Ok(())
}
