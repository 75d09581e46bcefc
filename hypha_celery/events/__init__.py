"""Events are the truth: kinds, the envelope, and the fold into a run projection."""

from hypha_celery.events.envelope import KINDS, TERMINAL_KINDS, Event
from hypha_celery.events.fold import apply_event, fold, new_view

__all__ = ["KINDS", "TERMINAL_KINDS", "Event", "apply_event", "fold", "new_view"]
