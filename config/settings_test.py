"""Test settings: the real ones with fast hashing and nothing leaving the machine."""
from __future__ import annotations

import os
import secrets

# The web servers and workers the tests start run with DEBUG off, which needs a key (config/startup.py):
# one per test session, inherited by every process the tests start.
os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))

from config.settings import *  # noqa: E402,F401,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
LANGUAGE_CODE = "zh-hans"
MEMORY_ENQUEUE_TASKS = False
EMBEDDING_PROVIDER = "none"  # tests that need vectors opt in
RESIDENT_GC_FREEZE = False  # a test process builds and drops resident indexes thousands of times
SHORT_TERM_ACTIVATION = "process"  # a shared one would write to REDIS_URL (tests/memory/test_shared_activation.py opts in)
