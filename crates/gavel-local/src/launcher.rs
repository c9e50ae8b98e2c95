//! Where a node listens and how its process is started.

use std::path::Path;
use std::process::Command;

use crate::Error;

/// Places nodes: the address each one listens on (and is reached at), and
/// the command that runs the binary for it. The [`crate::Cluster`] adds the
/// `node` subcommand and every flag to that command, and owns the process.
///
/// The command must exec the binary itself (not a shell that forks it), so
/// that the child's PID is the node's and signals sent to it hit the node.
pub trait Launcher: Send + Sync + std::fmt::Debug {
    /// The `host:port` node `id` listens on. Called once per node, when the
    /// cluster is created or the node is added; restarts keep the address.
    fn address(&self, id: u64) -> Result<String, Error>;

    /// The command that runs `binary` for node `id`; by default the binary
    /// itself, in the current network namespace.
    fn command(&self, id: u64, binary: &Path) -> Result<Command, Error> {
        let _ = id;
        Ok(Command::new(binary))
    }
}

/// Nodes on 127.0.0.1 in the current namespace: on free ports, or on
/// consecutive ports from a base (node `i` on `base + i - 1`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Loopback {
    base_port: Option<u16>,
}

impl Loopback {
    /// Every node on a free port (see [`crate::free_port`]).
    pub fn free_ports() -> Loopback {
        Loopback { base_port: None }
    }

    /// Node `i` on `base_port + i - 1`, as `gavel dev --base-port` promises.
    pub fn from_base_port(base_port: u16) -> Loopback {
        Loopback { base_port: Some(base_port) }
    }
}

impl Launcher for Loopback {
    fn address(&self, id: u64) -> Result<String, Error> {
        let port = match self.base_port {
            None => crate::free_port()?,
            Some(base) => id
                .checked_sub(1)
                .and_then(|offset| u16::try_from(offset).ok())
                .and_then(|offset| base.checked_add(offset))
                .ok_or_else(|| Error::Launch { id, detail: format!("no port {base} + {id} - 1") })?,
        };
        Ok(format!("127.0.0.1:{port}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_ports_are_consecutive_and_bounded() {
        let launcher = Loopback::from_base_port(7401);
        assert_eq!(launcher.address(1).expect("node 1"), "127.0.0.1:7401");
        assert_eq!(launcher.address(3).expect("node 3"), "127.0.0.1:7403");
        assert!(Loopback::from_base_port(u16::MAX).address(2).is_err());
        assert!(launcher.address(0).is_err());
    }

    #[test]
    fn free_ports_are_on_loopback() {
        let launcher = Loopback::free_ports();
        let first = launcher.address(1).expect("a port");
        assert!(first.starts_with("127.0.0.1:"), "{first}");
    }
}
