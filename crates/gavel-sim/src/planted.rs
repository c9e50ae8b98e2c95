//! Planted bugs in the simulation (`gavel_core::mutants`): a run plants
//! [`crate::SimConfig::planted_bug`] in every simulated node. Only the
//! planted-bug test (`tests/planted.rs`) and a replay of one of its seeds
//! set it.

use crate::Mutant;

/// The environment variable that names the planted bug of a replay.
pub const MUTANT_VAR: &str = "GAVEL_SIM_MUTANT";

/// The one command that replays `seed` with `planted` (or none).
pub fn replay_command(seed: u64, planted: Option<Mutant>) -> String {
    match planted {
        None => crate::replay_command(seed),
        Some(mutant) => format!(
            "GAVEL_SIM_SEED={seed} {MUTANT_VAR}={} cargo test -p gavel-sim --test seeds -- replay_one_seed --nocapture",
            mutant.name()
        ),
    }
}

/// The planted bug [`MUTANT_VAR`] names, if set: an unknown name is an
/// error that lists the known ones.
pub fn from_env() -> Result<Option<Mutant>, String> {
    let Ok(name) = std::env::var(MUTANT_VAR) else { return Ok(None) };
    let known: Vec<&str> = Mutant::ALL.iter().map(|mutant| mutant.name()).collect();
    Mutant::from_name(&name)
        .map(Some)
        .ok_or_else(|| format!("{MUTANT_VAR}={name} names no planted bug; known: {}", known.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replay_command_names_the_planted_bug() {
        let command = replay_command(7, Some(Mutant::UnsyncedAppend));
        assert!(command.starts_with("GAVEL_SIM_SEED=7 GAVEL_SIM_MUTANT=unsynced-append "), "{command}");
        assert!(command.ends_with("--test seeds -- replay_one_seed --nocapture"), "{command}");
        assert_eq!(replay_command(7, None), crate::replay_command(7));
    }
}
