"""What a process keeps for its whole life, kept out of the cyclic garbage collector's way.

The resident indexes (lexical postings and statistics, node texts, the concept graph,
vectors), jieba's dictionary and Django's own tables are big containers that live as
long as the process. CPython's full (oldest-generation) collection walks every one of
them: on a large store a web process pays a long stall for one such pass, now and then
in the middle of a turn. :func:`gc.freeze` moves every object alive at that moment to a
generation the collector never walks (objects are still freed by reference counting; only
cyclic garbage alive at the freeze would stay).

``settle()`` is called after a resident structure is (re)built and ``settle_process()``
once a web or worker process has loaded what it keeps (config/gunicorn.py,
config/celery.py). ``RESIDENT_GC_FREEZE = False`` turns both off (the test settings do:
a test process builds and drops indexes thousands of times).
"""
from __future__ import annotations

import ctypes
import gc

from django.conf import settings


def _enabled() -> bool:
    return settings.RESIDENT_GC_FREEZE


def _trim() -> None:
    """Hand the allocator's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing).

    Building a resident structure allocates far more than it keeps (rows, token strings, sort
    buffers); without this a process keeps that peak as its resident size for the rest of its life.
    """
    if _malloc_trim is not None:
        _malloc_trim(0)


def _find_malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):  # not glibc
        return None


_malloc_trim = _find_malloc_trim()


def settle() -> None:
    """Freeze what is alive now (O(1): the collector's lists are moved, nothing is walked) and give
    the build's free memory back."""
    if _enabled():
        gc.freeze()
        _trim()


def settle_process() -> None:
    """Collect once, then freeze: a process that has loaded what it keeps, before it serves."""
    if _enabled():
        gc.collect()
        gc.freeze()
        _trim()
