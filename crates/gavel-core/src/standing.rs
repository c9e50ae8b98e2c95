//! Bounded standing approvals (issue #25): one decision that covers at
//! most N uses within a window, for one capability and one requester,
//! bound to the approved input's hash or to equal values at chosen JSON
//! pointers ("5 refunds for one order within an hour"). There is no
//! unbounded form: N and the window are required and bounded by
//! [`STANDING_USES_MAX`] and [`STANDING_WINDOW_MS_MAX`].
//!
//! This file holds the types, their stateless check and the input binding;
//! spending a use is the orchestrator's (`machine/execution_commands.rs`,
//! `Resume`): one use per `Resume`, in the same command that creates the
//! execution; the last use consumes (closes) the approval, and the window
//! is the approval's post-approval expiry.

use serde_json::Value;

use crate::error::{DomainError, ErrorCode};
use crate::limits::{STANDING_POINTERS_MAX, STANDING_USES_MAX, STANDING_WINDOW_MS_MAX};
pub use crate::model::{Standing, StandingSpec};
use crate::validate::{invalid_if_any, Problems};

impl Standing {
    /// Uses left.
    pub fn uses_left(&self) -> u32 {
        self.spec.uses_max.saturating_sub(u32::try_from(self.used_by.len()).expect("uses are bounded"))
    }
}

/// Checks a standing approval's terms against its approved input (canonical
/// JSON): bounds, and every bound pointer well formed and present in the
/// input. Every problem is listed.
pub fn check_spec(spec: &StandingSpec, approved_input: &str) -> Result<(), DomainError> {
    let mut problems = Problems::new();
    if spec.uses_max == 0 || spec.uses_max > STANDING_USES_MAX {
        problems.push(format!("standing.usesMax must be from 1 to {STANDING_USES_MAX}, not {}", spec.uses_max));
    }
    if spec.window_ms == 0 || spec.window_ms > STANDING_WINDOW_MS_MAX {
        problems.push(format!("standing.windowMs must be from 1 to {STANDING_WINDOW_MS_MAX}, not {}", spec.window_ms));
    }
    if spec.bound_pointers.len() > STANDING_POINTERS_MAX {
        problems.push(format!(
            "standing.boundPointers holds {}, over the limit of {STANDING_POINTERS_MAX}",
            spec.bound_pointers.len()
        ));
    }
    let input: Option<Value> = serde_json::from_str(approved_input).ok();
    for pointer in spec.bound_pointers.iter().take(STANDING_POINTERS_MAX) {
        let well_formed = pointer.starts_with('/') && pointer.len() <= crate::limits::ID_BYTES_MAX;
        if !well_formed {
            problems.push(format!("standing.boundPointers: {pointer:?} is not a JSON pointer like /order_id"));
        } else if input.as_ref().and_then(|input| input.pointer(pointer)).is_none() {
            problems.push(format!("standing.boundPointers: {pointer} names nothing in the approved input"));
        }
    }
    invalid_if_any(problems, "invalid standing approval")
}

/// Whether a use's input (canonical JSON) may run under `standing`,
/// approved for `approved_input`: equal at every bound pointer.
/// `APPROVAL_INPUT_MISMATCH` names the first pointer that differs.
pub fn check_binding(standing: &Standing, approved_input: &str, use_input: &str) -> Result<(), DomainError> {
    let parse = |text: &str| serde_json::from_str::<Value>(text).expect("canonical JSON parses");
    let (approved, used) = (parse(approved_input), parse(use_input));
    for pointer in &standing.spec.bound_pointers {
        let expected = approved.pointer(pointer).expect("bound pointers were checked against the approved input");
        if used.pointer(pointer) != Some(expected) {
            return Err(DomainError::new(
                ErrorCode::ApprovalInputMismatch,
                format!("the input differs from the approved input at {pointer}, which the standing approval binds"),
            ));
        }
    }
    Ok(())
}
