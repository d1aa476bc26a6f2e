//! What a valid configuration may still get wrong on this machine, said without refusing it:
//! `toolgate check-config` prints these, and the server logs them at start.
//!
//! A stdio app whose program cannot be found is not a configuration error (the program may be
//! installed later, and the app is started on first use), but it is the most common reason a
//! new app "does not work", and the error otherwise shows only when a client first calls it.

use crate::config::{AppUpstream, Config};
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// One line per problem, naming the app by its index and id.
pub fn warnings(config: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for (i, app) in config.apps.iter().enumerate() {
        let AppUpstream::Command { argv, env } = &app.upstream else { continue };
        let Some(program) = argv.first() else { continue };
        // The app's process searches the `PATH` it is given: its own `env`'s, or the gateway's.
        let path = env.get("PATH").map(OsString::from).or_else(|| std::env::var_os("PATH"));
        if let Some(problem) = program_problem(program, path.as_deref()) {
            out.push(format!("apps[{i}].command (app {}): {problem}; the app will fail to start", app.id));
        }
    }
    out
}

/// Why `program` would not start: a path that is not an executable file, or a bare name found
/// in no directory of `path`.
fn program_problem(program: &str, path: Option<&std::ffi::OsStr>) -> Option<String> {
    if program.contains('/') {
        return (!executable(Path::new(program))).then(|| format!("`{program}` is not an executable file"));
    }
    let dirs: Vec<PathBuf> = path.map(|p| std::env::split_paths(p).collect()).unwrap_or_default();
    if dirs.iter().any(|dir| executable(&dir.join(program))) {
        return None;
    }
    Some(format!("`{program}` is not found on PATH"))
}

fn executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_found_on_the_path_given_or_named_by_an_executable_path() {
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "not a program\n").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let path = Some(dir.path().as_os_str());
        assert_eq!(program_problem("tool", path), None);
        assert_eq!(program_problem("plain", path).as_deref(), Some("`plain` is not found on PATH"));
        assert_eq!(program_problem("other", path).as_deref(), Some("`other` is not found on PATH"));
        assert_eq!(program_problem("tool", None).as_deref(), Some("`tool` is not found on PATH"));
        assert_eq!(program_problem(&tool.to_string_lossy(), None), None);
        let plain = plain.to_string_lossy().into_owned();
        assert_eq!(program_problem(&plain, path), Some(format!("`{plain}` is not an executable file")));
    }
}
