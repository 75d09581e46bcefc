"""celery beat's schedule for a hypha deployment: copy this file and edit it.

One entry: the recovery supervisor (task ``hypha.supervisor``), every
``HYPHA_SWEEP_INTERVAL`` seconds (default 5), sent to ``hypha.coordinator``. Review
expiry needs no entry of its own: every sweep also expires the reviews past their
deadline (``hypha_celery.reviews.expire_due``), so reviews expire within one interval.
The message expires after one interval, so sweeps queued behind a busy coordinator
queue do not pile up.

Use it in your app module, so the worker (which reads the interval to space sweeps) and
beat see the same schedule::

    from beat.schedule import beat_schedule
    hypha = Hypha.from_env()
    hypha.celery.conf.beat_schedule = beat_schedule

then run beat as usual (``hypha beat --app myapp:hypha`` or ``celery -A myapp:celery
beat``). Two beats by mistake are safe: a sweep takes a lock (Redis key
``hypha:supervisor:lock``, see ``hypha_celery/beat/singleton.py``), so sweeps never
overlap and run at this interval's rate, not twice it. Interval schedules only: the
lock spaces sweeps by the interval it finds here.
"""

import os

#: Seconds between sweeps.
interval = float(os.environ.get("HYPHA_SWEEP_INTERVAL", "") or 5.0)

beat_schedule = {
    "hypha-supervisor": {
        "task": "hypha.supervisor",
        "schedule": interval,
        "options": {"queue": "hypha.coordinator", "expires": interval},
    },
}
