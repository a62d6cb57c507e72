"""The planner page's fork server imports this module first (web/server.py): one plan, before any query's process is
forked from it."""

from .worker import warm

warm()
