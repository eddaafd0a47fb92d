"""redact_text's cheap first look: it never lets through a text one of the secret
patterns would change."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from statewarden.redact import _MAYBE_RE, _maybe_secret, redact_text

_PIECES = st.sampled_from(
    [
        "auth",
        "BEARER",
        "Key",
        "toKen",
        "SECRET",
        "Pass",
        "pwd",
        "sk-",
        "RK-",
        "pK-",
        "ghp_",
        "GHO_",
        "ghr_",
        "XOX",
        "AIza",
        "123456:",
        "12345:",
        "gh_",
        "ſecret",
        "\u212aey",
        "é",
        " ",
        "=",
        ":",
    ]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.text(max_size=8)), max_size=8))
def test_first_look_agrees_with_the_pattern(parts: list[str]) -> None:
    """The substring first look (ASCII text) and the case-insensitive pattern it replaces
    (any other text) say the same of every text: a secret the pattern flags is looked at."""
    text = "".join(parts)
    assert _maybe_secret(text) == (_MAYBE_RE.search(text) is not None)


def test_secrets_in_ordinary_log_lines_are_still_redacted() -> None:
    """Lines that pass the first look still have their values replaced."""
    lines = {
        "gateway.run: api_key=abcdef0123456789 sent": "abcdef0123456789",
        "telegram: 123456789:AAHabcdefghijklmnopqrstuvwxyz012345 refused": "AAHabcdefghij",
        "http: Authorization: Bearer abc.def.ghi failed": "abc.def.ghi",
        "provider: sk-abcdefghijklmnop1234 rejected": "sk-abcdefghijklmnop1234",
    }
    for line, secret in lines.items():
        assert secret not in redact_text(line)
    plain = "agent.loop: turn 12: tool call web_search returned 12 results"
    assert redact_text(plain) is plain
