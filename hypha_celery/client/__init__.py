"""The application-facing API: ``Hypha`` and run handles."""
