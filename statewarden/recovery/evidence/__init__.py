"""Evidence: where a row comes back from, and what proves it: its FTS and index copies, the
old index pages and Hermes' known layouts when the schema is lost, cells of other
tables, lost writes, and other copies of the database (snapshots, retired WAL captures,
pre-update backups) that prove whose they are.
"""
