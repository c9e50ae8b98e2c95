"""Every bound the client enforces itself, one constant each, with its reason.

The server enforces the same bounds (crates/gavel-core/src/limits.rs and
canonical_json.rs, docs/limits.md); the client checks them first so that a
value that can never be accepted fails at once, naming the JSON path, instead
of after a network round trip.
"""

from __future__ import annotations

#: Largest integer magnitude a JSON number may carry: 2**53 - 1, the server's
#: and JavaScript's safe-integer bound (I-JSON, RFC 7493). A larger int is not
#: held exactly by every IEEE-754 double reader (2**53 + 1 reads as 2**53, so
#: 2**53 itself is ambiguous), so the server refuses it and this client
#: refuses it first, with its path, rather than letting it be rounded. A float
#: whose canonical text would be such an integer (integral, below 1e21) is
#: refused for the same reason.
SAFE_INTEGER_MAX = 2**53 - 1

#: From here ECMAScript writes an integral double with an exponent
#: (``1e+21``), which every reader takes as the same double.
EXPONENT_FORM_MIN = 1e21

#: Deepest nesting of arrays and objects (gavel-core's JSON_DEPTH_MAX): the
#: server refuses deeper input, and the serializer recurses once per level.
JSON_DEPTH_MAX = 64

#: Longest pause between two retries of one call, in seconds, as the Rust and
#: TypeScript SDKs cap it: pauses double from 50 ms up to this.
RETRY_PAUSE_MAX_S = 1.0

#: First pause before retrying a refused attempt, in seconds.
RETRY_PAUSE_FIRST_S = 0.05

#: Deadline of one status call of the survey a failed call ends with (the
#: Rust SDK's SURVEY_TIMEOUT), in seconds.
SURVEY_TIMEOUT_S = 1.0

#: Extra time the client waits past a call's deadline before treating the
#: attempt as unanswered (the Rust SDK adds the same 200 ms).
DEADLINE_SLACK_S = 0.2

#: Longest single WaitExecution long-poll of ``wait_final``, in seconds: well
#: under the server's WAIT_MS_MAX (60 s) and the client's per-attempt
#: deadline arithmetic, so one slow node costs at most this much.
WAIT_SLICE_S = 10.0

#: Longest id (approval, execution, capability, ...) in UTF-8 bytes
#: (gavel-core's ID_BYTES_MAX): the server refuses longer ones, and derives
#: an approval id from an execution id within it.
ID_BYTES_MAX = 128
