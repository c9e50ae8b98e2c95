//! Planted bugs in the simulation (`gavel_core::mutants`): a run plants
//! [`crate::SimConfig::planted_bug`] in every node, which takes effect only
//! when this crate is built with its `mutants` feature (it turns on the
//! feature in gavel-server, -store, -raft and -core). The default build of
//! the workspace never has it: the planted-bug test is its own target
//! (`tests/planted.rs`, `required-features = ["mutants"]`).

use crate::Mutant;

/// Whether this build can plant bugs (the `mutants` feature).
pub const BUILT: bool = cfg!(feature = "mutants");

/// The environment variable that names the planted bug of a replay.
pub const MUTANT_VAR: &str = "GAVEL_SIM_MUTANT";

/// The one command that replays `seed` with `planted` (or none).
pub fn replay_command(seed: u64, planted: Option<Mutant>) -> String {
    match planted {
        None => crate::replay_command(seed),
        Some(mutant) => format!(
            "GAVEL_SIM_SEED={seed} {MUTANT_VAR}={} cargo test -p gavel-sim --features mutants --test seeds -- replay_one_seed --nocapture",
            mutant.name()
        ),
    }
}

/// The planted bug [`MUTANT_VAR`] names, if set: an unknown name, or a
/// name in a build without the `mutants` feature (where it would silently
/// do nothing), is an error that says what to do.
pub fn from_env() -> Result<Option<Mutant>, String> {
    let Ok(name) = std::env::var(MUTANT_VAR) else { return Ok(None) };
    let known: Vec<&str> = Mutant::ALL.iter().map(|mutant| mutant.name()).collect();
    let mutant = Mutant::from_name(&name)
        .ok_or_else(|| format!("{MUTANT_VAR}={name} names no planted bug; known: {}", known.join(", ")))?;
    if !BUILT {
        return Err(format!("{MUTANT_VAR}={name} needs a build with planted bugs: add `--features mutants`"));
    }
    Ok(Some(mutant))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replay_command_names_the_planted_bug_and_the_feature() {
        let command = replay_command(7, Some(Mutant::UnsyncedAppend));
        assert!(command.starts_with("GAVEL_SIM_SEED=7 GAVEL_SIM_MUTANT=unsynced-append "), "{command}");
        assert!(command.contains("--features mutants"), "{command}");
        assert_eq!(replay_command(7, None), crate::replay_command(7));
    }
}
