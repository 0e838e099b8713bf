"""Deprecated name of :mod:`unlearnkit.metrics.forgetting_quality_metric` (the NeurIPS 2023 challenge's
forgetting-quality *metric*), kept for imports not yet moved (``metrics/output_test.py``). The experiment
that trains the models it scores is :mod:`unlearnkit.forgetting_quality_experiment`."""
from .forgetting_quality_metric import *  # noqa: F401,F403
