"""Events are the truth: kinds, the envelope, and the fold into a run projection."""

from hypha_celery.events.envelope import KINDS, TERMINAL_KINDS, Event, EventType, as_kind
from hypha_celery.events.fold import apply_event, fold, new_view
from hypha_celery.events.status import TERMINAL_STATUSES, Status
from hypha_celery.events.view import View

__all__ = ["KINDS", "TERMINAL_KINDS", "TERMINAL_STATUSES", "Event", "EventType", "Status",
           "View", "apply_event", "as_kind", "fold", "new_view"]
