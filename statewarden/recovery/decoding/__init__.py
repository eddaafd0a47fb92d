"""Decoding: pure reads of one open file (its pages, -wal and -journal frames, records,
schema, key sets, SQLite's and FTS5's own checks). Nothing here knows where a row comes
back from or how a file is built.
"""
