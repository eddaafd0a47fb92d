"""Rules: Hermes log records and journal entries -> signals and observations.

Pure functions, no I/O. The log tailer (``watch/logtail.py``) cuts files into
records (``watch/records.py``); the journal follower hands over journald JSON entries;
both end here. This module is the way in (one record, its raw text, a journal entry);
the work is done by its parts:

- ``watch/matching.py``: which signals a record gives, and the order the rules are
  tried in (first match wins; then the generic corruption and locked signals);
- ``watch/rule.py``: what one rule is; the rules by what they are about:
  ``rules_corruption.py`` (corruption and integrity), ``rules_wal.py`` (WAL and the
  journal mode), ``rules_holders.py`` (holders and locks), ``rules_repair.py``
  (Hermes' own repairs), ``rules_delivery.py`` (messages reaching state.db, the
  fallbacks, the gateway's tasks);
- ``watch/record_signals.py``: the signal a matched record becomes;
- ``watch/signal_batch.py``: a poll's signals of one fingerprint merged into one;
- ``watch/cron.py``: cron sessions seen -> ``cron_started`` observations.

Every name callers import from here is still here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from statewarden.incidents import Found, Signal
from statewarden.targets import Target
from statewarden.watch.cron import CRON_SESSIONS_REMEMBERED as CRON_SESSIONS_REMEMBERED  # noqa: PLC0414
from statewarden.watch.cron import CronSessions as CronSessions  # noqa: PLC0414
from statewarden.watch.cron import cron_sessions as cron_sessions  # noqa: PLC0414
from statewarden.watch.matching import _RULE_TRIGGER_RE as _RULE_TRIGGER_RE  # noqa: PLC0414
from statewarden.watch.matching import RULES as RULES  # noqa: PLC0414
from statewarden.watch.matching import _needles as _needles  # noqa: PLC0414
from statewarden.watch.matching import build_signal, classify
from statewarden.watch.matching import is_state_db_record as is_state_db_record  # noqa: PLC0414
from statewarden.watch.record_signals import SUMMARY_ERROR_MAX_CHARS as SUMMARY_ERROR_MAX_CHARS  # noqa: PLC0414
from statewarden.watch.record_signals import TRANSCRIPT_FAILURES_ERROR as TRANSCRIPT_FAILURES_ERROR  # noqa: PLC0414
from statewarden.watch.record_signals import clip, make_signal
from statewarden.watch.records import LogRecord, journal_record, parse_record
from statewarden.watch.rule import Rule as Rule  # noqa: PLC0414
from statewarden.watch.signal_batch import MERGED_EVIDENCE_RECORDS as MERGED_EVIDENCE_RECORDS  # noqa: PLC0414
from statewarden.watch.signal_batch import SignalBatch as SignalBatch  # noqa: PLC0414

_JSONL_FALLBACK_RE = re.compile(
    r"SQLite session store unavailable, falling back to JSONL: (?P<error>.*)", re.DOTALL
)


def signals_from_record(
    record: LogRecord,
    target: Target,
    *,
    cron: CronSessions | None = None,
    now: float | None = None,
) -> list[Found]:
    """Every signal (and cron observation) one log record gives. Never raises.

    ``cron``, when given, remembers the cron session ids seen so far; a new one gives
    an ``Observation(what="cron_started")``. ``now`` stamps records without a time.
    """
    out: list[Found] = []
    if cron is not None:
        out.extend(cron.observe(record, target, now))
    out.extend(build_signal(hit, record, target, now) for hit in classify(record, target))
    return out


def signals_from_log(
    record: LogRecord | str,
    target: Target,
    *,
    cron: CronSessions | None = None,
    now: float | None = None,
) -> list[Found]:
    """``signals_from_record`` for a record, or for raw record text (parsed first)."""
    if isinstance(record, str):
        record = parse_record(record)
    return signals_from_record(record, target, cron=cron, now=now)


def signals_from_journal(
    entry: Mapping[str, Any],
    target: Target,
    *,
    cron: CronSessions | None = None,
    now: float | None = None,
) -> list[Found]:
    """Signals from one journald JSON entry (``journalctl -o json``) of a Hermes unit.

    The gateway prints ``[gateway] Warning: SQLite session store unavailable, falling
    back to JSONL: <error>`` to stdout, so only its unit's journal has it: that is
    ``jsonl_fallback``. Every log-file rule applies to the message as well (the gateway
    also logs to stderr). Never raises.
    """
    record = journal_record(entry)
    out: list[Found] = []
    m = _JSONL_FALLBACK_RE.search(record.message)
    if m is not None:
        error = clip(m["error"], SUMMARY_ERROR_MAX_CHARS)
        out.append(
            make_signal(
                record,
                target,
                "jsonl_fallback",
                f"the gateway cannot use state.db and writes sessions to JSONL: {error}",
                key="",
                severity=None,
                now=now,
                rule="jsonl_fallback",
                error=error,
            )
        )
    for item in signals_from_record(record, target, cron=cron, now=now):
        # The fallback line already says the store failed; "locked" in it is its cause.
        if m is not None and isinstance(item, Signal) and item.fields.get("rule") == "locked":
            continue
        out.append(item)
    return out
