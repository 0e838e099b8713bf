"""Matplotlib for the toolkit's figures: the Agg backend, and user text drawn literally.

Names a user chose (a task named ``random $10%$``, a layer, a method variant) reach titles, tick
labels and legends; matplotlib would read ``$...$`` in them as mathtext (and fail on an unbalanced
``$``). :func:`literal_text` draws every text of the figures a function makes with
``text.parse_math`` off.
"""
from __future__ import annotations

import functools


def literal_text(fn):
    """Run ``fn`` (which makes and saves figures) with the Agg backend and mathtext parsing off."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import matplotlib

        matplotlib.use("Agg", force=False)
        with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
            return fn(*args, **kwargs)

    return wrapper
