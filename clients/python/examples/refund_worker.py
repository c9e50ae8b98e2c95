"""The refund worker: runs orders.refund.py under Gavel's leases.

    python refund_worker.py [ledger.jsonl]

Its payment-gateway stand-in records each charge in a JSON-lines ledger,
keyed by the execution's idempotency key: a retried attempt of the same
execution finds its charge there and does not refund twice. Its principal
needs the worker grant. Ctrl-C (or SIGTERM) stops it after the running
refund finishes.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import gavel

CAPABILITY_ID = "orders.refund.py"
LEDGER = Path(sys.argv[1] if len(sys.argv) > 1 else "py-refund-ledger.jsonl")
_ledger_lock = threading.Lock()


def refund(task: gavel.Task) -> dict[str, Any]:
    """Refunds once per idempotency key; the lease id goes along as the fencing token."""
    order_id, amount_cents = task.input["order_id"], task.input["amount_cents"]
    if not isinstance(amount_cents, int) or amount_cents <= 0:
        raise gavel.HandlerError.fatal(
            "INVALID_AMOUNT", f"amount_cents must be a positive integer, not {amount_cents!r}"
        )
    with _ledger_lock:
        charges = [json.loads(line) for line in LEDGER.read_text().splitlines()] if LEDGER.exists() else []
        charge = next((c for c in charges if c["idempotency_key"] == task.idempotency_key), None)
        if charge is None:
            charge = {
                "idempotency_key": task.idempotency_key,
                "reference": f"ch_{len(charges) + 1:04d}",
                "order_id": order_id,
                "amount_cents": amount_cents,
                "fencing_token": task.lease_id,
            }
            with LEDGER.open("a") as ledger:
                ledger.write(json.dumps(charge) + "\n")
    return {"orderId": order_id, "reference": charge["reference"], "refunded": True}


def main() -> None:
    options = gavel.ClientOptions.from_env()
    worker = gavel.Worker({CAPABILITY_ID: refund}, queues=[CAPABILITY_ID], options=options)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: worker.stop())
    print(f"refund worker: polling {CAPABILITY_ID} at {','.join(options.endpoints)}; ledger {LEDGER}", flush=True)
    worker.run_sync()
    print("refund worker: stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
