"""The representation audit (Mirage, extended): did an unlearned model really forget?

``audit(original, unlearned, retrained, split)`` compares the unlearned model with the original
and with one or more models retrained without the forget set, layer by layer, and returns an
:class:`AuditReport` with a verdict (``erased``, ``suppressed``, ``overforgotten``, ``collapsed``,
``not_forgotten``, ``inconclusive``), the evidence in plain words, and every number behind it.
``write_audit(report, out_dir)`` writes audit.json / audit.md / audit.html. The user's own models
on the user's own data go through :mod:`unlearnkit.audit.user`: the top-level ``unlearnkit.audit``
is its function :func:`~unlearnkit.audit.user.audit` (``uk.audit(original, unlearned, retrained,
forget=..., retain=..., test=...)``) and :class:`Auditor` audits several unlearned models against
one set of references. The thresholds live in :class:`AuditConfig`, whose docstring lists the
measurements they were calibrated on.

The audit imports ``metrics`` and ``models`` (and the shared evaluation pass), never
``methods``: it does not know how a model was made.
"""
from .checks import Check, Measure
from .config import AuditConfig
from .core import audit
from .layers import Interval, LayerResult
from .render import audit_html, audit_markdown, write_audit
from .report import AuditReport
from .resurface import recalibrate_batchnorm
from .user import Auditor, AuditResult, audit_models, audit_split
from .verdict import VERDICTS

__all__ = ["AuditConfig", "AuditReport", "AuditResult", "Auditor", "Check", "Interval", "LayerResult", "Measure",
           "VERDICTS", "audit", "audit_html", "audit_markdown", "audit_models", "audit_split", "recalibrate_batchnorm",
           "write_audit"]
