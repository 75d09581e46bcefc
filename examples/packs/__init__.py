"""Domain packs: products declared as data (see support_triage/README.md)."""
