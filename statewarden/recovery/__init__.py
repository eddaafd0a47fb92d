"""The recovery engine: check a database and build a verified new one from it.

A private copy of the database bundle (``bundle``) is checked without a cap
(``integrity``) and classified (``diagnose``, using the file's own ``schema``); ``recover``
escalates only as far as the damage needs: indexes rebuilt, a fresh file rebuilt row by
row (``scan``, ``rebuild``), rows salvaged from leaf pages (``pages``) and from WAL
frames SQLite does not replay (``wal``), rows compared with and rebuilt from their FTS
copies (``copies``); the output is
verified on its own terms (``verify``) and the ``report`` is measured on both files.
The source is only ever read.
"""
