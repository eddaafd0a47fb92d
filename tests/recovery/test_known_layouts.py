"""The known layouts are data files, written from real files of each Hermes and read
with ``importlib.resources``: what the checked-in files hold is what those Hermes
releases write today, fresh and upgraded, byte for byte; the wheel carries them and an
installed statewarden reads them from it."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from lab import write_known_schemas as writer
from lab.hermes_fixtures import NEWEST_HERMES, hermes_python
from statewarden.recovery.evidence.known_schemas import (
    KNOWN_SCHEMAS,
    LAYOUTS,
    NEWEST_KNOWN_VERSION,
    UPGRADED_FROM,
)
from statewarden.watch.status import NEWEST_KNOWN_SCHEMA
from tests.support.repo import REPO

FOLDER = REPO / "statewarden" / "recovery" / "layouts"
ALL = [*writer.LAYOUTS, *writer.OPENED_BY_NEWEST]


@pytest.mark.parametrize("layout", ALL)
def test_each_file_is_what_that_hermes_writes(layout: str) -> None:
    """Each layout's data file is, to the byte, what ``lab/write_known_schemas.py``
    writes from a real file of that Hermes (a fixture it wrote, or a copy of one that
    Hermes 0.22's own SessionDB opened and upgraded): a Hermes release that changes its
    schema fails here until the script is run again."""
    assert (FOLDER / f"{layout}.json").read_text() == writer.layout_text(layout)


def test_the_index_lists_every_layout_in_order() -> None:
    """``index.json`` lists exactly the layouts the script writes, in the order they are
    tried (0.13.0's 11, 0.19.0's 22, main's 30, 0.22's 31 fresh and upgraded), every
    file in the folder is one of them, and each file names itself."""
    assert (FOLDER / "index.json").read_text() == writer.index_text()
    assert list(LAYOUTS) == ALL
    assert sorted(p.stem for p in FOLDER.glob("*.json") if p.name != "index.json") == sorted(ALL)
    for name, layout in LAYOUTS.items():
        assert json.loads((FOLDER / f"{name}.json").read_text())["layout"] == name
        assert KNOWN_SCHEMAS[name] == (layout.description, layout.objects)
    versions = {name: layout.schema_version for name, layout in LAYOUTS.items()}
    assert versions == {
        "0.13.0": 11,
        "0.19.0": 22,
        "30-external": 30,
        "30-legacy": 30,
        **{name: 31 for name in ALL if name.startswith("31-")},
    }
    assert UPGRADED_FROM == writer.UPGRADED_FROM


def test_the_newest_known_schema_is_named_once() -> None:
    """The newest schema the layouts know is the one status names a newer schema
    against (31): a layout added without status knowing, or the reverse, fails here."""
    assert NEWEST_KNOWN_VERSION == NEWEST_KNOWN_SCHEMA == 31


def test_a_fresh_database_of_hermes_022(tmp_path: Path) -> None:
    """A database Hermes 0.22's SessionDB creates in a new home (opened and closed, no
    rows) has exactly the rows of layout 31-external, trigger texts byte for byte."""
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(
        [hermes_python(NEWEST_HERMES), "-c", writer.OPEN_ONCE, str(home)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert KNOWN_SCHEMAS["31-external"][1] == tuple(writer.schema_rows(home / "state.db"))


def test_an_installed_wheel_reads_its_own_layouts(tmp_path: Path) -> None:
    """The wheel built from the tree carries every layout file, and statewarden imported
    from the wheel itself (a zip: no file path to read next to the module) loads every
    layout from it through importlib.resources."""
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("statewarden-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    want = {f"statewarden/recovery/layouts/{n}.json" for n in [*ALL, "index"]}
    assert want <= names
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        " import statewarden; from statewarden.recovery.evidence.known_schemas import LAYOUTS;"
        " print(statewarden.__file__); print(len(LAYOUTS))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(wheel)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.splitlines()
    assert out[0].startswith(str(wheel))
    assert out[1] == str(len(ALL))
