"""The eleven GenAgent patterns on ``hypha.agents``, one runnable module each.

Every module has agent classes at module level, a ``run(hypha)`` that drives the pattern
against the ``MockBackend`` with data scripts, and a ``main()``::

    python -m examples.agents.debate

See ``docs/agents.md`` for the guide and the "choose your pattern" table.
"""
