"""``python -m tests.integration.slow_worker [--summary-delay S] [--import-delay S] -- <celery args>``

A real ``celery`` worker with test-only slowdowns patched in at the edge, so the
integration tests can SIGKILL it at a chosen moment without product code knowing
about tests:

* ``--summary-delay`` sleeps right after a summarisation has written its episode —
  inside the summarisation's transaction (the ``summary_delay_open`` log line marks
  the moment);
* ``--import-delay`` sleeps after each progress write of an import, between its
  transactions.

The patches are made in the main process before the pool forks, so every child
inherits them.
"""
from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import time

logger = logging.getLogger("tests.integration.slow_worker")


def _after(module, name: str, seconds: float, note: str) -> None:
    original = getattr(module, name)

    @functools.wraps(original)
    def slowed(*args, **kwargs):
        result = original(*args, **kwargs)
        logger.warning("%s", note.format(**kwargs))
        time.sleep(seconds)
        return result

    setattr(module, name, slowed)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--summary-delay", type=float, default=0.0)
    parser.add_argument("--import-delay", type=float, default=0.0)
    parser.add_argument("celery", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from memory import services
    from memory.dispatch import jobs

    if args.summary_delay:
        # services.add_episode runs inside pipeline.summarize_stream's transaction
        _after(services, "add_episode", args.summary_delay, "summary_delay_open stream={stream_id}")
    if args.import_delay:
        _after(jobs, "job_progress", args.import_delay, "import_delay job={job_id} progress={progress}")

    from celery.bin.celery import main as celery_main

    celery = [a for a in args.celery if a != "--"]
    sys.argv = ["celery", *celery]
    return celery_main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
