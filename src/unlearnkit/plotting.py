"""Matplotlib for the toolkit's figures: the Agg backend, and user text drawn literally.

Names a user chose (a task named ``random $10%$``, a layer, a method variant) reach titles, tick
labels and legends; matplotlib would read ``$...$`` in them as mathtext (and fail on an unbalanced
``$``). Those texts are made with :data:`LITERAL` (``parse_math=False``) or passed through
:func:`literal_legend`; every other text keeps mathtext, which matplotlib's own tick labels need
(a log axis labels its ticks ``$\\mathdefault{10^{0}}$``).
"""
from __future__ import annotations

import functools

#: keyword arguments for a Text made from a user's string: drawn as written, never as mathtext
LITERAL = {"parse_math": False, "usetex": False}


def literal_legend(legend):
    """The entries of ``legend`` (method, dataset or layer names) drawn literally; returns ``legend``
    (None stays None)."""
    if legend is not None:
        for text in legend.get_texts():
            text.set_parse_math(False)
            text.set_usetex(False)
    return legend


def literal_text(fn):
    """Run ``fn`` (which makes and saves figures) with the Agg backend and TeX off; mathtext stays on for
    matplotlib's own texts (tick labels), the function passes :data:`LITERAL` for user strings."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import matplotlib

        matplotlib.use("Agg", force=False)
        with matplotlib.rc_context({"text.usetex": False}):
            return fn(*args, **kwargs)

    return wrapper


def plain_log_ticks(axis) -> None:
    """Label a log ``axis`` (``ax.xaxis``) with plain numbers (``140``, ``200``) instead of matplotlib's
    ``1.4×10²``, which overlap on an axis spanning less than a decade; minor labels thin out as usual."""
    from matplotlib.ticker import LogFormatter

    axis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
