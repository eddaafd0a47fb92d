"""The rules about messages reaching state.db: writes that fail or stop, the JSONL
divert and the on-disk fallback, transcript queues that fill, spool or lag, messages
dropped, and the gateway's tasks that died."""

from __future__ import annotations

from statewarden.watch.rule import rule

FATAL_OTHER = rule(
    "fatal_other",
    r"FATAL: .*(?:state\.db|session storage)",
    "write_failures",
    "critical",
    "Hermes stopped writing session storage: {rest}",
    key="fatal",
)

JSONL_DIVERT_FAILED = rule(
    "jsonl_divert_failed",
    r"JSONL divert failed after state\.db (?P<cause>.+?) for "
    r"(?P<session>[^\s:]+)",
    "messages_dropped",
    "critical",
    "messages are being lost: state.db {cause} and the JSONL divert failed too (session {session})",
)

TURN_STOPPED = rule(
    "turn_stopped",
    r"No reply: the turn was stopped because session storage could not "
    r"be written",
    "write_failures",
    "critical",
    "a turn got no reply because session storage could not be written",
    key="turn_stopped",
)

WRITES_REFUSED = rule(
    "writes_refused",
    r"Session DB refused further writes on this handle for (?P<session>\S+) "
    r"\((?P<error>[^)]*)\)",
    "jsonl_fallback",
    "critical",
    "Hermes stopped writing session {session} to state.db ({error}) and diverts its "
    "transcript to the on-disk fallback",
    key="refused",
)

DIVERT_FAILED_REPLACED = rule(
    "divert_failed_replaced",
    r"(?P<what>pending fallback|JSONL divert) failed for replaced state\.db transcript "
    r"on (?P<session>\S+)",
    "write_failures",
    "error",
    "the {what} of session {session} failed after state.db was replaced: its messages "
    "may be only in memory",
    key="divert_failed",
)

APPEND_REJECTED = rule(
    "append_rejected",
    r"Session DB transcript append rejected for (?P<why>.+?) (?P<session>\S+) with no "
    r"unique live child; not retrying",
    "messages_dropped",
    "error",
    "a message of session {session} was dropped: state.db refused its transcript append "
    "({why}) and Hermes does not retry",
    key="rejected",
)

TRANSCRIPT_STALLED = rule(
    "transcript_stalled",
    r"Session DB transcript append failed for (?P<session>\S+) \(failure_count="
    r"(?P<failure_count>\d+), pending=(?P<pending>\d+), spooled_to_disk=\d+\); session "
    r"is stalled",
    "write_failures",
    "critical",
    "session {session} is stalled: its transcript append to state.db failed "
    "{failure_count} times ({pending} pending); Hermes needs an operator",
    key="transcript_append",
)

QUEUE_SPOOLED = rule(
    "queue_spooled",
    r"Session DB transcript pending queue full for (?P<session>\S+) \(cap=(?P<cap>\d+)\)"
    r"; spooled oldest message to (?P<spool>\S+)",
    "write_failures",
    "error",
    "the transcript queue of session {session} is full (cap {cap}): state.db is not "
    "taking writes; Hermes spools the oldest to {spool} for replay",
    key="queue_spooled",
)

SPOOL_REJECTED = rule(
    "spool_rejected",
    r"Spooled transcript row for (?P<session>\S+) (?:in \S+ )?was rejected by the database",
    "write_failures",
    "error",
    "state.db rejected a spooled message of session {session} on replay: {rest}",
    key="spool_rejected",
)

SHUTDOWN_FLUSH = rule(
    "shutdown_flush",
    r"Shutdown transcript flush failed|Preserved (?P<count>\d+) in-memory message\(s\) for "
    r"session (?P<session>\S+) \(possible FTS corruption",
    "write_failures",
    "error",
    "messages did not reach state.db at shutdown; Hermes kept them in a recovery file: {rest}",
    key="shutdown_flush",
)

STORE_UNAVAILABLE = rule(
    "store_unavailable",
    r"SQLite session store not available: (?P<error>.*)"
    r"|Broadcasting state\.db failure warning to home channels: (?P<told>.*)",
    "write_failures",
    "error",
    "the gateway has no working state.db: {rest}",
    key="store_unavailable",
)

OPEN_FAILED = rule(
    "open_failed",
    r"Session DB creation failed \(will retry next turn\): (?P<error>.*)"
    r"|Failed to create SQLite session: (?P<other>.*)",
    "write_failures",
    None,
    "a Hermes agent could not open state.db: {rest}",
    key="open_failed",
)

SESSION_ROW_MISSING = rule(
    "session_row_missing",
    r"Session DB row for (?P<session>\S+) is missing and could not be recreated",
    "write_failures",
    None,
    "session {session} has no row in state.db and Hermes could not recreate it: its "
    "messages wait in memory",
    key="session_row",
)

QUEUE_FULL = rule(
    "queue_full",
    r"Session DB transcript pending queue full for (?P<session>\S+) "
    r"\(cap=(?P<cap>\d+)\); dropping oldest",
    "messages_dropped",
    "critical",
    "messages are being lost: the transcript queue of session {session} is full "
    "(cap {cap}), oldest dropped",
)

TRANSCRIPT_APPEND = rule(
    "transcript_append",
    r"Session DB transcript append failed for (?P<session>\S+) "
    r"\(failure_count=(?P<failure_count>\d+), pending=(?P<pending>\d+)\); will retry: "
    r"(?P<error>.*)",
    "write_failures",
    None,
    "transcript append to state.db failed (session {session}, {failure_count} failures, "
    "{pending} pending): {error}",
    key="transcript_append",
)

APPEND_MESSAGE = rule(
    "append_message",
    r"Session DB append_message failed: (?P<error>.*)",
    "write_failures",
    None,
    "writing a message to state.db failed: {error}",
    key="append_message",
)

ROUTING = rule(
    "routing",
    r"state\.db routing (?P<op>save|load) failed: (?P<error>.*)",
    "write_failures",
    None,
    "state.db routing {op} failed: {error}",
    key=lambda m: f"routing_{m['op']}",
)

GAVE_UP = rule(
    "gave_up",
    r"Supervised task (?P<task>.+?) died (?P<times>\d+) times in rapid "
    r"succession.*giving up restarts",
    "task_died",
    "critical",
    "gateway task {task} died {times} times in a row; Hermes gave up restarting it",
    key=lambda m: m["task"],
)

TASK_DIED = rule(
    "task_died",
    r"Supervised task (?P<task>.+?) died: (?P<error>.*)",
    "task_died",
    None,
    "gateway task {task} died: {error}",
    key=lambda m: m["task"],
)

TRANSCRIPT_LAG = rule(
    "transcript_lag",
    r"Persisted transcript lagged live cached history for session "
    r"(?P<session>\S+) \(disk=(?P<disk>\d+), memory=(?P<memory>\d+)\)",
    "write_failures",
    "error",
    "session {session}: state.db holds {disk} messages, memory {memory} "
    "(writes are not reaching state.db; possible FTS corruption)",
    key="transcript_lag",
)
