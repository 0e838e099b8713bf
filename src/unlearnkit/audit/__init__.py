"""The representation audit (Mirage, extended): did an unlearned model really forget?

``audit(original, unlearned, retrained, split)`` compares the unlearned model with the original
and with one or more models retrained without the forget set, layer by layer, and returns an
:class:`AuditReport` with a verdict (``erased``, ``suppressed``, ``collapsed``,
``not_forgotten``, ``inconclusive``), the evidence in plain words, and every number behind it.
``write_audit(report, out_dir)`` writes audit.json / audit.md / audit.html. The thresholds live
in :class:`AuditConfig`, whose docstring lists the measurements they were calibrated on.

The audit imports ``metrics`` and ``models`` (and the shared evaluation pass), never
``methods``: it does not know how a model was made.
"""
from .config import AuditConfig
from .core import audit
from .layers import Interval, LayerResult
from .render import audit_html, audit_markdown, write_audit
from .report import AuditReport
from .resurface import ResurfaceResult, recalibrate_batchnorm, relearn_copy
from .verdict import VERDICTS

__all__ = ["AuditConfig", "AuditReport", "Interval", "LayerResult", "ResurfaceResult", "VERDICTS", "audit",
           "audit_html", "audit_markdown", "recalibrate_batchnorm", "relearn_copy", "write_audit"]
