"""Renderings of results for people and for other tools.

Every renderer is a pure function from already-computed results to text, so
the same output can be written to a terminal, a file or a golden. Never imports the
translator: a report renders what was found, whatever produced the xDS.
"""
