"""Harnessed ReAct tests."""
