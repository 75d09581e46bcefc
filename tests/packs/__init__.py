"""Domain pack tests."""

from tests.cli.helpers import ROOT

#: The example pack the tests load.
EXAMPLE = ROOT / "examples" / "packs" / "support_triage" / "pack.yaml"
