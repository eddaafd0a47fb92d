"""docs/safety.md rule 17: every line Hermes logs about its database is either a signal
or deliberately ignored, with the reason written down; a Hermes release that adds a line
fails a test by name.

The texts are read from the installed Hermes releases' own source (0.19.0 in the tests'
interpreter, 0.22.2.post1 in ``.venv-hermes-0.22.2.post1``; never imported, never copied
here) by ``hermes_texts.py``, which says which modules, calls, levels and words count.
Each text is filled with sample values (``sample_line``) and run through the real rules
(``watch/rules.py``); one that gives no signal must be listed in
``statewarden/watch/ignored_lines.py`` with its reason.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from lab.hermes_fixtures import HERMES_VERSION, NEWEST_HERMES, log_line
from statewarden.incidents.signals import Signal
from statewarden.targets import Target
from statewarden.watch.ignored_lines import IGNORED_LINES, UNREAD_CALLS, IgnoredLine, UnreadCall
from statewarden.watch.records import parse_record
from statewarden.watch.rules import signals_from_journal, signals_from_record
from tests.support.hermes_texts import (
    LoggedText,
    Unresolved,
    about_the_database,
    read_texts,
    sample_line,
    site_packages,
)

VERSIONS = (HERMES_VERSION, NEWEST_HERMES)
HOME = Path("/home/u/.hermes")
TARGET = Target("default", HOME, HOME / "state.db", HOME / "logs")
WHEN = dt.datetime(2026, 12, 6, 15, 48, 6)
# What a field is filled with: the database's path (a label, a path, an error), else a
# number; a text is a signal when either gives one.
SAMPLE_VALUES = (str(HOME / "state.db"), "3")
LEVELS = {"log": "WARNING", "print": ""}


def signals_of(text: LoggedText) -> list[Signal]:
    """The signals the sample lines of ``text`` give (a print goes through the journal)."""
    out: list[Signal] = []
    for value in SAMPLE_VALUES:
        line = sample_line(text.template, value)
        if text.level == "print":
            found = signals_from_journal({"MESSAGE": line}, TARGET)
        else:
            level = LEVELS.get(text.level, text.level.upper())
            record = parse_record(
                log_line(WHEN, level, text.logger, line), str(HOME / "logs/agent.log")
            )
            found = signals_from_record(record, TARGET)
        out.extend(s for s in found if isinstance(s, Signal))
    return out


def ignored_by(
    text: LoggedText, table: tuple[IgnoredLine, ...] = IGNORED_LINES
) -> list[IgnoredLine]:
    return [e for e in table if text.module in e.modules and e.text in text.template]


def unclassified(
    texts: list[LoggedText], table: tuple[IgnoredLine, ...] = IGNORED_LINES
) -> list[str]:
    """Each text about the database that is neither a signal nor ignored, named by its
    module, line and text."""
    return [
        f"{t.module}:{t.line}: {t.template[:160]!r}"
        for t in texts
        if about_the_database(t) and not ignored_by(t, table) and not signals_of(t)
    ]


def unnamed_calls(
    calls: list[Unresolved], table: tuple[UnreadCall, ...] = UNREAD_CALLS
) -> list[str]:
    return [
        f"{c.module}:{c.line}: {c.expression}"
        for c in calls
        if not any(u.module == c.module and u.expression == c.expression for u in table)
    ]


@pytest.fixture(scope="module", params=VERSIONS)
def hermes(request: pytest.FixtureRequest) -> tuple[list[LoggedText], list[Unresolved]]:
    """The texts one installed Hermes logs and prints, and its calls whose text is not
    known. Skipped only when that Hermes is not installed."""
    version: str = request.param
    site = site_packages(version)
    if site is None:
        pytest.skip(f"Hermes {version} is not installed: run packaging/setup-dev.sh")
    return read_texts(site)


@pytest.fixture(scope="module")
def every_release() -> list[tuple[list[LoggedText], list[Unresolved]]]:
    out = []
    for version in VERSIONS:
        site = site_packages(version)
        if site is None:
            pytest.skip(f"Hermes {version} is not installed: run packaging/setup-dev.sh")
        out.append(read_texts(site))
    return out


def test_every_line_about_the_database_is_a_signal_or_ignored(
    hermes: tuple[list[LoggedText], list[Unresolved]],
) -> None:
    """Each text the installed Hermes logs about its database gives a signal or is listed
    in ignored_lines.py; the failure names each one by module, line and text."""
    texts, _ = hermes
    missing = unclassified(texts)
    assert not missing, "no rule and not in statewarden/watch/ignored_lines.py:\n" + "\n".join(
        missing
    )


def test_every_log_call_of_unknown_text_is_named(
    hermes: tuple[list[LoggedText], list[Unresolved]],
) -> None:
    """A log call whose text the source does not tell is listed in UNREAD_CALLS with why it
    is no signal; a new one fails here by module, line and expression."""
    _, calls = hermes
    missing = unnamed_calls(calls)
    assert not missing, "not in ignored_lines.UNREAD_CALLS:\n" + "\n".join(missing)


def test_no_ignored_line_is_a_signal(hermes: tuple[list[LoggedText], list[Unresolved]]) -> None:
    """An entry of the ignored table never covers a text a rule turns into a signal (the
    table and the rules cannot both be right)."""
    texts, _ = hermes
    both = [
        f"{t.module}:{t.line}: {t.template[:100]!r} ({', '.join(e.text for e in ignored_by(t))})"
        for t in texts
        if ignored_by(t) and signals_of(t)
    ]
    assert not both, "ignored, yet a rule matches:\n" + "\n".join(both)


def test_every_entry_is_still_logged(
    every_release: list[tuple[list[LoggedText], list[Unresolved]]],
) -> None:
    """Each entry of the ignored tables covers a text or call some installed Hermes still
    has: a stale entry would hide the next line that happens to hold its words."""
    texts = [t for found, _ in every_release for t in found]
    calls = [c for _, found in every_release for c in found]
    stale = [e.text for e in IGNORED_LINES if not any(e in ignored_by(t) for t in texts)]
    stale += [
        u.expression
        for u in UNREAD_CALLS
        if not any(c.module == u.module and c.expression == u.expression for c in calls)
    ]
    assert not stale, stale


def test_every_entry_gives_a_reason() -> None:
    """Every entry says why, and its text is a part of a sentence, not a word that would
    cover any line."""
    for entry in IGNORED_LINES:
        assert len(entry.text) >= 10, entry
        assert entry.reason.strip(), entry
        assert entry.modules, entry
    for call in UNREAD_CALLS:
        assert call.reason.strip(), call
        assert call.expression, call


def test_the_texts_include_what_hermes_builds_indirectly(
    every_release: list[tuple[list[LoggedText], list[Unresolved]]],
) -> None:
    """The reader follows Hermes' indirections: the WAL-reset warning (a table of
    once-per-process messages, logged through ``logger.log(level, message, ...)``), the
    moved-aside line (an f-string in a local variable) and ``state.db repair {verb}``
    (an f-string field filled by the callers) are all read."""
    templates = {t.template for found, _ in every_release for t in found}
    for phrase in (
        "(interpreter %s) is vulnerable to the WAL-reset corruption bug",
        "was empty or damaged ({} bytes) and has been moved aside to {}",
        "state.db repair skipped: %s",
    ):
        assert any(phrase in t for t in templates), phrase


def test_a_release_that_adds_a_line_fails_naming_it(tmp_path: Path) -> None:
    """A new state-layer line and a new gateway line naming state.db, in a release laid
    out like Hermes, are reported with their module and line; a known one is not."""
    (tmp_path / "gateway").mkdir()
    (tmp_path / "hermes_state_new.py").write_text(
        "import logging\nlogger = logging.getLogger(__name__)\n\n\n"
        "def f(x):\n"
        "    logger.warning('Brand new trouble with the journal: %s', x)\n"
        "    logger.warning('state.db schema is malformed (%s) — attempting automatic repair', x)\n"
        "    logger.debug('state.db debug chatter: %s', x)\n"
    )
    (tmp_path / "gateway" / "newer.py").write_text(
        "import logging\nlogger = logging.getLogger(__name__)\n"
        "MSG = 'state.db went somewhere new: %s'\n\n\n"
        "def g(x):\n    logger.error(MSG, x)\n"
    )
    texts, calls = read_texts(tmp_path)
    assert unclassified(texts) == [
        "hermes_state_new.py:6: 'Brand new trouble with the journal: %s'",
        "gateway/newer.py:7: 'state.db went somewhere new: %s'",
    ]
    assert calls == []
