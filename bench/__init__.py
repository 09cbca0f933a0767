"""Benchmarks and evaluations (``python -m bench.<name>``; ``make bench``, ``make eval``)."""
from __future__ import annotations

import os
import secrets

# The servers and workers a benchmark starts run as deployed, DEBUG off, which needs a key (config/startup.py):
# a throwaway one per run unless the shell sets one.
os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
