//! The checks made before any run: each program named is an executable
//! file, and the logs folder can be created and written to, so that a bad
//! path stops the comparison at once (exit 2) instead of after the rows
//! that do not need it.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

/// `path` is a file with an execute bit; `what` names it in the error
/// (`--gateway PATH`).
pub fn executable(path: &Path, what: &str) -> Result<(), String> {
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("{what}: no program at {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{what}: {} is not a file", path.display()));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(format!("{what}: {} is not executable", path.display()));
    }
    Ok(())
}

/// Creates `dir` (and its parents) if needed and checks that a file can
/// be written there.
pub fn logs_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("--logs: cannot create {}: {e}", dir.display()))?;
    let probe = dir.join(format!(".peer-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .map_err(|e| format!("--logs: cannot write in {}: {e}", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder of its own under the system's temporary folder.
    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("peer-check-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_program_must_be_an_executable_file() {
        let dir = scratch("exe");
        let missing = dir.join("missing");
        let plain = dir.join("plain");
        std::fs::write(&plain, "").unwrap();
        let runnable = dir.join("runnable");
        std::fs::write(&runnable, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&runnable, std::fs::Permissions::from_mode(0o755)).unwrap();
        for (path, says) in [
            (&missing, "no program at"),
            (&plain, "not executable"),
            (&dir, "not a file"),
        ] {
            let error = executable(path, "--gateway PATH").unwrap_err();
            assert!(
                error.contains(says) && error.contains("--gateway"),
                "{error}"
            );
        }
        assert_eq!(executable(&runnable, "--gateway PATH"), Ok(()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_logs_folder_must_be_creatable() {
        let dir = scratch("logs");
        let file = dir.join("a-file");
        std::fs::write(&file, "").unwrap();
        // Under a regular file: no folder can be made there.
        let error = logs_dir(&file.join("logs")).unwrap_err();
        assert!(error.contains("--logs: cannot create"), "{error}");
        let fresh = dir.join("deep/logs");
        assert_eq!(logs_dir(&fresh), Ok(()));
        assert!(fresh.is_dir());
        assert_eq!(
            std::fs::read_dir(&fresh).unwrap().count(),
            0,
            "no probe left"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
