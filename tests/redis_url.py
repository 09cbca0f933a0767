"""The Redis database the tests may use (and flush): ``MEMORY_TEST_REDIS_URL``.

Tests flush this database before and after they use it, so it must never be the one a
running deployment uses. The default, database 15 of the local Redis, is not the
deployment default (database 0); point it elsewhere when 15 is taken, e.g.
``MEMORY_TEST_REDIS_URL=redis://127.0.0.1:6379/9 make test``.
"""
from __future__ import annotations

import os

TEST_REDIS_URL = os.environ.get("MEMORY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
#: The ``REDIS_URL`` this run was started with (``None``: the deployment default, database 0), kept
#: before tests/conftest.py points ``REDIS_URL`` at :data:`TEST_REDIS_URL` for the run.
DEPLOYMENT_REDIS_URL = os.environ.get("REDIS_URL")
