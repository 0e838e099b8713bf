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


def plain_number(value: float) -> str:
    """``0.6``, ``3``, ``20``, ``150``: a tick label as a reader writes it (never ``6×10⁻¹``)."""
    return f"{value:.3g}" if value < 1e5 else f"{value:.0f}"


def plain_log_ticks(axis) -> None:
    """Label a log ``axis`` (``ax.xaxis``) with plain numbers (``0.5``, ``3``, ``20``, ``200``) instead of
    matplotlib's ``3×10⁰`` and ``6×10⁻¹``: the decades and, between them, the ticks at 2 and 5 (``0.2``,
    ``0.5``, ``2``, ``5``, ``20``...); the other minor ticks stay unlabelled."""
    import math

    from matplotlib.ticker import FuncFormatter

    def minor(value, _pos) -> str:
        if value <= 0:
            return ""
        mantissa = round(value / 10 ** math.floor(math.log10(value) + 1e-9), 6)
        return plain_number(value) if mantissa in (2.0, 5.0) else ""

    axis.set_major_formatter(FuncFormatter(lambda v, _pos: plain_number(v) if v > 0 else ""))
    axis.set_minor_formatter(FuncFormatter(minor))


def ratio_ticks(axis) -> None:
    """Ticks of a log ``axis`` of ratios as plain multiples: ``0.25×``, ``0.5×``, ``1×``, ``2×``, ``4×`` (powers of
    two, every other one or sparser when the axis spans many of them, ``1×`` always among them when in view);
    no minor ticks, no ``10⁰``."""
    from matplotlib.ticker import FuncFormatter, NullLocator

    axis.set_major_locator(RatioLocator())
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{plain_number(v)}×" if v > 0 else ""))


def _ratio_locator_class():
    import math

    from matplotlib.ticker import Locator

    class _RatioLocator(Locator):
        """Powers of two within the view (at most about 8 of them; a step that keeps 2**0 = 1)."""

        def __call__(self):
            lo, hi = self.axis.get_view_interval()
            return self.tick_values(lo, hi)

        def tick_values(self, vmin, vmax):
            lo, hi = sorted((max(vmin, 1e-300), max(vmax, 1e-300)))
            k0, k1 = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
            step = max(1, math.ceil((k1 - k0) / 8))
            start = k0 - (k0 % step)
            return [2.0 ** k for k in range(start, k1 + 1, step)]

    return _RatioLocator


def RatioLocator():  # noqa: N802 - a class, made on first use (matplotlib is imported lazily)
    """A matplotlib ``Locator`` of powers of two (:func:`ratio_ticks`)."""
    return _ratio_locator_class()()
