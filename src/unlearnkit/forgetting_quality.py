"""Deprecated name of :mod:`unlearnkit.forgetting_quality_experiment` (the ``unlearnkit forgetting-quality``
*experiment*: N unlearning runs against N retrains, scored by the metric in
:mod:`unlearnkit.metrics.forgetting_quality_metric`). Kept for imports not yet moved (``benchmarks/fq_jobs.py``);
importing it warns (``DeprecationWarning``)."""
import warnings

from .forgetting_quality_experiment import *  # noqa: F401,F403
from .forgetting_quality_experiment import _reference, _task  # noqa: F401  (benchmarks/fq_jobs.py imports them)

warnings.warn("unlearnkit.forgetting_quality is now unlearnkit.forgetting_quality_experiment (the metric is "
              "unlearnkit.metrics.forgetting_quality_metric)", DeprecationWarning, stacklevel=2)
