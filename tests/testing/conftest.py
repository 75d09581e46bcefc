"""The ``hypha`` pytest plugin tested the way a user runs it: pytest's ``pytester``."""

pytest_plugins = ["pytester"]
