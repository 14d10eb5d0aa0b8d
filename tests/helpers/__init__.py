"""Helpers the suites import, and the fixtures conftest.py loads from here."""
