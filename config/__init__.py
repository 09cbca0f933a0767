from __future__ import annotations

import os

# One BLAS thread: a single query vector is faster on one core than split over two;
# must be set before numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from config.celery import app as celery_app

__all__ = ("celery_app",)
