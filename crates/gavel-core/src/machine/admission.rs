//! Admission: the one judge of whether a command may be applied, asked by
//! the edge before it proposes (so a refused command costs no log entry)
//! and by `apply` first, at the command's log position (the answer that
//! counts: a `Revoke` or another principal's write may be ordered in
//! between).
//!
//! Admission runs, in this order and nowhere else: validation
//! ([`crate::precheck::check`], no state), authorization and ownership
//! ([`State::authorize_command`]), and the quotas that can be judged from
//! state ([`State::check_quota`]). A command handler judges only what needs
//! the records as the command finds them (an approval already decided, a
//! lease already lost) and takes what validation computed (canonical input,
//! its hash, a validity window) from the [`Checked`] command.

use crate::access::Caller;
use crate::command::Command;
use crate::error::DomainError;
use crate::machine::State;
use crate::precheck::Checked;

impl State {
    /// Whether `caller` may have `command` applied, stamped `now_ms` (cluster
    /// time is the later of it and the state's clock, as at apply), sent
    /// under `request_id` while `in_flight` of its principal's writes are
    /// proposed and not yet applied (the serving leader's count; 0 at
    /// apply). Returns the checked command, with what validation computed.
    ///
    /// [`State::apply`] asks it first; the edge asks it before proposing,
    /// in two steps so that validation, which parses the input, runs
    /// outside the state lock: [`crate::precheck::check`], then
    /// [`State::admit_checked`]. `None` (`--insecure`) is only validated.
    pub fn admit<'a>(
        &self,
        caller: Option<&Caller>,
        request_id: Option<&str>,
        command: &'a Command,
        now_ms: u64,
        in_flight: u64,
    ) -> Result<Checked<'a>, DomainError> {
        let checked = crate::precheck::check(command)?;
        self.admit_checked(caller, request_id, &checked, now_ms, in_flight)?;
        Ok(checked)
    }

    /// [`State::admit`] of a command validation already passed: its
    /// authorization and ownership, then its quotas. A command handler
    /// never repeats any of it.
    pub fn admit_checked(
        &self,
        caller: Option<&Caller>,
        request_id: Option<&str>,
        checked: &Checked<'_>,
        now_ms: u64,
        in_flight: u64,
    ) -> Result<(), DomainError> {
        let command = checked.command();
        self.authorize_command(caller, command, now_ms)?;
        self.check_quota(caller, request_id, command, now_ms, in_flight)
    }
}
