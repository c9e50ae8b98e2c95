//! Finding the `gavel` binary the nodes run.

use std::path::{Path, PathBuf};

use crate::Error;

/// The environment variable that names the `gavel` binary explicitly.
pub const GAVEL_BIN: &str = "GAVEL_BIN";

/// How many directories up from the running executable the binary is looked
/// for: the executable's own directory (`target/<profile>` for the binary,
/// `.../examples` or `.../deps` for examples and tests) and the two above it.
const ANCESTORS_SEARCHED: usize = 3;

/// Finds the `gavel` binary: `explicit` when given; else the running
/// executable when it is `gavel` (`gavel dev`, `chaos` and `bench` run their
/// own build, a `--features mutants` one included); else `$GAVEL_BIN`; else
/// `gavel` in the cargo target directory next to the running executable (an
/// example or a test lives in `target/<profile>/{examples,deps}`, the binary
/// in `target/<profile>`).
///
/// It never builds anything: a nested `cargo build` would wait forever for
/// the lock of the `cargo test` that runs it. When nothing is found the error
/// names the paths tried and `cargo build -p gavel-cli`.
pub fn resolve_gavel_binary(explicit: Option<&Path>) -> Result<PathBuf, Error> {
    if let Some(path) = explicit {
        return existing(path.to_path_buf());
    }
    let exe = std::env::current_exe().map_err(|source| Error::io("locating the running executable", source))?;
    if exe.file_name().is_some_and(|name| name == "gavel") {
        return Ok(exe);
    }
    if let Some(path) = std::env::var_os(GAVEL_BIN) {
        return existing(PathBuf::from(path));
    }
    let candidates: Vec<PathBuf> =
        exe.ancestors().skip(1).take(ANCESTORS_SEARCHED).map(|dir| dir.join("gavel")).collect();
    match candidates.iter().find(|path| path.is_file()) {
        Some(path) => Ok(path.clone()),
        None => Err(Error::BinaryNotFound {
            looked_at: candidates.iter().map(|path| path.display().to_string()).collect::<Vec<_>>().join(", "),
        }),
    }
}

/// `path` when it is a file, else the error naming it.
fn existing(path: PathBuf) -> Result<PathBuf, Error> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::BinaryNotFound { looked_at: path.display().to_string() })
    }
}
