"""celery beat's schedule for hypha, copied and edited by the user: see schedule.py."""
