"""Events are the truth: kinds, their payloads, the envelope, and the fold into a run
projection."""

from hypha_celery.events.envelope import KINDS, TERMINAL_KINDS, Event, EventType, as_kind
from hypha_celery.events.fold import apply_event, fold, new_view
from hypha_celery.events.payloads import PAYLOADS, Payload, payload_as, payload_of
from hypha_celery.events.status import TERMINAL_STATUSES, RunStatus
from hypha_celery.events.view import View

__all__ = ["KINDS", "PAYLOADS", "TERMINAL_KINDS", "TERMINAL_STATUSES", "Event", "EventType",
           "Payload", "RunStatus", "View", "apply_event", "as_kind", "fold", "new_view",
           "payload_as", "payload_of"]
