from tests.cli.conftest import DemoRun, demo_run

__all__ = ["DemoRun", "demo_run"]
