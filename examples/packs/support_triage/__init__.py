"""The support-triage domain pack (pack.yaml) and its code (nodes.py)."""
