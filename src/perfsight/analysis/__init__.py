"""Analyses: pure functions from a run's canonical tables (``RunTables``) to small Arrow result tables.

They never print or write files; the export files, the web pages, the CLI and the Python API all call
them, so every number is computed in exactly one place.
"""
