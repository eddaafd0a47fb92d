"""Building: one build of the output file (``rebuild.py`` runs its parts in order over one
open build: ``build.py``): a table's own rows, salvaged rows, columns repaired from
witnesses, the FTS tables.
"""
