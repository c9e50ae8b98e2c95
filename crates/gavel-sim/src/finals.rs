//! The final reads of a simulated run: after the faults heal and the
//! cluster settles, every node's own replica is read for every approval and
//! execution the workload touched, as the chaos harness's final reads do
//! through each node (`gavel_chaos::run`), with the audit trail, so that
//! `no_lost_writes`, `liveness` and `fencing` judge the simulation too.
//!
//! The process harness reads through a node's gRPC edge, which forwards to
//! the leader; here each node's local replica is read directly (the run is
//! in one process), which is stricter: a write lost on one replica shows.
//! The reads happen between two simulation steps, so they see one instant.

use gavel_chaos::history::{FinalState, OpResult};
use gavel_chaos::workload;
use gavel_server::convert::approval::approval_out;
use gavel_server::convert::execution::{event_out, execution_out};
use gavel_server::node::Node;

/// Audit events read per page.
const AUDIT_PAGE: u32 = 1000;

/// What the workload touched: approval ids and execution ids.
#[derive(Debug, Clone, Default)]
pub struct Touched {
    /// Approvals created.
    pub approvals: Vec<String>,
    /// Executions submitted (or attempted).
    pub executions: Vec<String>,
}

/// Node `id`'s final state, read from its own replica; `running` is `None`
/// for a node that is down (its state reads as unreadable: no hash).
pub fn final_state(id: u64, running: Option<&Node>, touched: &Touched) -> FinalState {
    let mut state = FinalState {
        node: id,
        state_hash: None,
        applied_index: None,
        leader: None,
        approvals: Vec::new(),
        executions: Vec::new(),
        audit: Vec::new(),
        leader_changes: 0,
    };
    let Some(node) = running else { return state };
    let status = node.raft.status();
    state.applied_index = status.last_applied_index;
    state.leader = status.leader_id;
    state.state_hash = Some(node.reads.state_hash());
    node.reads.read(|replica| {
        let now_ms = node.read_time_ms(replica, None);
        for id in &touched.approvals {
            let view = replica.approval(id).map(|approval| approval_out(&approval, approval.status_at(now_ms)));
            // An approval this replica never heard of reads as absent, as
            // the gRPC read answers it.
            if let OpResult::Approval { state: approval_state, consumed_by } = workload::approval_view(view.as_ref()) {
                state.approvals.push((id.clone(), approval_state, consumed_by));
            }
        }
        for id in &touched.executions {
            if let Some(execution) = replica.execution(id) {
                state.executions.push(workload::execution_view(&execution_out(&execution)));
            }
        }
        // The whole audit trail, page by page, as the process harness lists it.
        let mut cursor = 0;
        loop {
            let page = replica.events_after(cursor, AUDIT_PAGE);
            let Some(last) = page.last().filter(|last| last.cursor > cursor) else { break };
            cursor = last.cursor;
            state.audit.extend(page.iter().map(|event| workload::audit_event(&event_out(event))));
        }
    });
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_that_is_down_reads_as_unreadable() {
        let touched = Touched { approvals: vec!["a".into()], executions: vec!["e".into()] };
        let state = final_state(2, None, &touched);
        assert_eq!(state.node, 2);
        assert!(state.state_hash.is_none() && state.approvals.is_empty() && state.executions.is_empty());
    }
}
