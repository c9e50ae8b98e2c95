//! `gavel audit verify` reads an export once and keeps the tree's frontier,
//! not the leaves: the memory it holds grows by at most
//! `VERIFY_BYTES_PER_EVENT_MAX` per event (docs/audit.md). Measured with a
//! counting allocator (the peak of live bytes during a verification, over
//! what was live before it), for two sizes: the difference is the cost of
//! the events between them, whatever the fixed part is.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use gavel_core::audit_export::{self, ExportLine, VERIFY_BYTES_PER_EVENT_MAX};
use gavel_core::merkle;

/// The system allocator, counting live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// A global allocator is unsafe to implement: this one only forwards to the
// system's and counts.
#[allow(unsafe_code)]
// SAFETY: every call forwards to `System` with the caller's own arguments,
// so `System`'s guarantees are the caller's; the counters are atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: a pointer `System` allocated with this layout, as the caller guarantees.
        unsafe { System.dealloc(pointer, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// An export of `count` events shaped like Gavel's (a few hundred bytes of
/// canonical JSON each), with a checkpoint of all of them.
fn export(count: u64) -> Vec<String> {
    let mut frontier = merkle::Frontier::new();
    let mut leaves = Vec::with_capacity(count as usize);
    for index in 0..count {
        let event = format!(
            concat!(
                r#"{{"actor":{{"attributes":{{}},"display_name":null,"id":"alice","kind":"User"}},"approval_id":"apr-{}","#,
                r#""capability_id":"refund.issue","correlation_id":null,"cursor":{},"execution_id":"exe-{}","#,
                r#""input_hash":null,"kind":"Requested","principal":null,"timestamp_ms":{}}}"#
            ),
            index,
            index + 1,
            index,
            1_760_000_000_000u64 + index
        );
        let hash = merkle::leaf_hash(event.as_bytes());
        frontier.push(hash, |_, _, _| {});
        leaves.push(audit_export::leaf_line(index, &hash, Some(event)));
    }
    let checkpoint = merkle::checkpoint_body("gavel-audit/memory", count, &frontier.root());
    let mut lines = vec![audit_export::format_line(), audit_export::export_line(&ExportLine::Checkpoint(checkpoint))];
    lines.extend(leaves);
    lines
}

/// The most bytes live at once while `lines` are verified, over those live before.
fn peak_while_verifying(lines: &[String]) -> u64 {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let summary = audit_export::verify_export(lines.iter().map(String::as_str), |_| Ok(())).expect("verifies");
    assert_eq!(summary.events, lines.len() as u64 - 2);
    (PEAK.load(Ordering::Relaxed) - before) as u64
}

#[test]
fn verify_holds_at_most_the_documented_bytes_per_event() {
    let (small, large) = (2_000u64, 20_000u64);
    let (small_lines, large_lines) = (export(small), export(large));
    let small_peak = peak_while_verifying(&small_lines);
    let large_peak = peak_while_verifying(&large_lines);
    let per_event = large_peak.saturating_sub(small_peak) as f64 / (large - small) as f64;
    println!("verify: peak {small_peak} B for {small} events, {large_peak} B for {large}: {per_event:.2} B per event");
    assert!(
        per_event <= VERIFY_BYTES_PER_EVENT_MAX as f64,
        "verify holds {per_event:.2} B per event, more than {VERIFY_BYTES_PER_EVENT_MAX} (peaks {small_peak} and {large_peak} B)"
    );
    // The whole peak is small: the frontier, one line's parse, the checkpoint.
    assert!(large_peak < 64 * 1024, "peak {large_peak} B for {large} events");
}
