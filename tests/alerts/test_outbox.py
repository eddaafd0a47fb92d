"""The durable outbox on real files: written before sending, in order, deduplicated,
bounded, and a restart resumes exactly where it stopped."""

from __future__ import annotations

import json
from pathlib import Path

from statewarden.alerts.message import Item, Notification
from statewarden.alerts.outbox import Outbox


def note(key: str, incident: int = 1) -> Notification:
    item = Item(
        incident, "corruption", "critical", "/db", "default", "malformed", "opened", 1.0, 2.0, 3
    )
    return Notification(key, "firing", "box", 1.0, [item])


class TestOutbox:
    def test_on_disk_before_delivery_and_gone_after(self, tmp_path: Path) -> None:
        """put() writes the entry file (fsynced) before anything is sent; done() removes it."""
        box = Outbox(tmp_path / "outbox", max_entries=10)
        entry = box.put(note("a"), "telegram")
        assert entry is not None
        path = tmp_path / "outbox" / entry.filename
        assert json.loads(path.read_text())["notification"]["key"] == "a"
        box.done(entry)
        assert not path.exists()
        assert box.pending() == []

    def test_order_and_restart(self, tmp_path: Path) -> None:
        """Entries come back after a restart in the order they were queued, per sink."""
        box = Outbox(tmp_path / "outbox", max_entries=10)
        for k in "abc":
            box.put(note(k), "telegram")
            box.put(note(k), "journald")
        again = Outbox(tmp_path / "outbox", max_entries=10)
        assert [e.key for e in again.pending("telegram")] == ["a", "b", "c"]
        assert [e.key for e in again.pending("journald")] == ["a", "b", "c"]
        e = again.put(note("d"), "telegram")
        assert e is not None
        assert e.seq > max(x.seq for x in again.pending("journald"))

    def test_duplicates_are_dropped_pending_or_delivered(self, tmp_path: Path) -> None:
        """The same key is not queued twice, nor after it was delivered, even after a restart."""
        box = Outbox(tmp_path / "outbox", max_entries=10)
        first = box.put(note("a"), "telegram")
        assert first is not None
        assert box.put(note("a"), "telegram") is None
        box.done(first)
        assert box.put(note("a"), "telegram") is None
        again = Outbox(tmp_path / "outbox", max_entries=10)
        assert again.put(note("a"), "telegram") is None
        assert again.put(note("a"), "journald") is not None

    def test_delivered_but_file_left_is_not_resent(self, tmp_path: Path) -> None:
        """Killed between 'delivered' being recorded and the file's removal: on restart the
        entry is recognised as delivered and removed, not sent again."""
        box = Outbox(tmp_path / "outbox", max_entries=10)
        entry = box.put(note("a"), "telegram")
        assert entry is not None
        saved = (tmp_path / "outbox" / entry.filename).read_text()
        box.done(entry)
        (tmp_path / "outbox" / entry.filename).write_text(saved)
        again = Outbox(tmp_path / "outbox", max_entries=10)
        assert again.pending() == []
        assert not (tmp_path / "outbox" / entry.filename).exists()

    def test_bounded_and_says_how_many_were_dropped(self, tmp_path: Path) -> None:
        """Past max_entries the oldest go; the next notification carries the count."""
        box = Outbox(tmp_path / "outbox", max_entries=3)
        for k in range(5):
            box.put(note(f"k{k}"), "telegram")
        pending = box.pending("telegram")
        assert [e.key for e in pending] == ["k2", "k3", "k4"]
        assert [e.notification.dropped for e in pending] == [0, 1, 1]
        assert len(list((tmp_path / "outbox").glob("*.telegram.json"))) == 3

    def test_damaged_entry_set_aside(self, tmp_path: Path) -> None:
        """A damaged entry file is renamed *.damaged and reported; the others load."""
        box = Outbox(tmp_path / "outbox", max_entries=10)
        box.put(note("a"), "telegram")
        (tmp_path / "outbox" / "000000000099.telegram.json").write_text("{not json")
        again = Outbox(tmp_path / "outbox", max_entries=10)
        assert [e.key for e in again.pending()] == ["a"]
        assert (tmp_path / "outbox" / "000000000099.telegram.json.damaged").exists()
        assert "unreadable" in again.load_problems[0]

    def test_progress_survives_restart(self, tmp_path: Path) -> None:
        """Parts already sent of a long message are recorded, so a restart skips them."""
        box = Outbox(tmp_path / "outbox", max_entries=10)
        entry = box.put(note("a"), "telegram")
        assert entry is not None
        box.progress(entry, parts_sent=2)
        assert Outbox(tmp_path / "outbox", max_entries=10).pending()[0].parts_sent == 2

    def test_unwritable_folder_keeps_entries_in_memory(self, tmp_path: Path) -> None:
        """A folder that cannot be written (here: a file where it should be) does not lose
        the entry: it is kept in memory and the error is reported."""
        (tmp_path / "outbox").write_text("not a folder")
        box = Outbox(tmp_path / "outbox", max_entries=10)
        entry = box.put(note("a"), "telegram")
        assert entry is not None
        assert not entry.on_disk
        assert box.persist_error
        assert box.next("telegram") is entry
        box.done(entry)
        assert box.pending() == []


class TestHostileFolder:
    def test_planted_symlink_is_not_followed(self, tmp_path: Path) -> None:
        """An outbox path that is a symlink to somewhere else is never written through;
        entries are kept in memory and the reason is reported."""
        target = tmp_path / "elsewhere"
        target.mkdir()
        (tmp_path / "outbox").symlink_to(target)
        box = Outbox(tmp_path / "outbox", max_entries=10)
        entry = box.put(note("a"), "telegram")
        assert entry is not None
        assert not entry.on_disk
        assert box.persist_error == f"{tmp_path / 'outbox'}: is a symbolic link; not written to"
        box.done(entry)
        assert list(target.iterdir()) == []

    def test_folder_writable_by_others_is_not_used(self, tmp_path: Path) -> None:
        """An outbox folder writable by others is not written to, and the persist error says why."""
        (tmp_path / "outbox").mkdir()
        (tmp_path / "outbox").chmod(0o777)
        box = Outbox(tmp_path / "outbox", max_entries=10)
        box.put(note("a"), "telegram")
        assert "writable by others (mode 777)" in box.persist_error
        assert list((tmp_path / "outbox").iterdir()) == []


class TestTokenInEvidence:
    def test_bot_token_in_a_log_line_is_not_sent_on(self) -> None:
        """A bot token inside a logged request URL is redacted from the evidence lines a
        notification carries."""
        from statewarden.alerts.message import evidence_lines

        line = "ERROR telegram: POST https://api.telegram.org/bot123456789:AAHxyzxyzxyzxyzxyzxyzxyzxyzxyzxyz12/getUpdates failed"
        (out,) = evidence_lines([line])
        assert "AAHxyz" not in out
        assert "bot***redacted***/getUpdates" in out
