"""The MLP probe test: does a non-linear read-out find the forgotten class more easily in the audited model than in
the references?

At the penultimate layer (:attr:`~unlearnkit.audit.context.ForwardPasses.penultimate`), the training forget rows
and up to ``mlp_probe_max_retain`` retained training rows (drawn with the audit seed), each model (the audited
model and every reference) is read by :func:`unlearnkit.metrics.mlp_probe.heldout_log_loss` with
``mlp_probe_seeds`` probe seeds drawn from the audit seed (fresh per audit, the same for every model of the audit),
and its loss is the mean over those seeds. The audited model is **told apart** when its log loss lies below the
references' one-sided Student-t prediction bound at ``mlp_probe_level`` (0.2): the same leave-one-out prediction
test as every other told-apart statistic (:func:`unlearnkit.audit.joint.beyond_references`), on the log scale.
Like the other told-apart tests it costs the model its certificate (``inconclusive``), never a flag.

When it runs (``AuditConfig.mlp_probe``): ``"auto"`` (the default) on class requests audited with 3 to
:data:`~unlearnkit.audit.config.REFERENCES_UNDER_ATTACK` − 1 references, where the other tests were not enough
against the attack suite; ``"on"`` on every class request with 3 or more; ``"off"`` never. Sample requests do not
run it (the forget rows are not a class a probe could find). It runs last, and only where every other test
certifies (:func:`unlearnkit.audit.core.with_probe_test`): it can only withhold ``erased``, so on any other verdict
it could not change anything, and it is the audit's most expensive step (six models × 15 fits); ``audit.json``
says why it did not run (``resurfacing.not_applicable.mlp_probe``).

Why (docs/audit.md, "The attack suite the audit is scored on"): an attacker that owns four retrains and relearns
as the audit relearns (``hardened_centre_canon``) kept a third of the original's excess yet was certified in 5
of 20 of its keepers' audits with five references, inside their spread on every statistic the audit read. Read
on the same digits audits with probe seeds that did not define the keepers, this probe at 0.2 left 0 of 366
keepers' audits certified [0, 1.0 %] and 81 % of genuine retrains' (417 of 512); 0.2 was chosen on those audits.
An attacker that also hid from an MLP probe of this kind lost the class for it (the ``hardened_centre_hide``
families). Were the references' log losses Gaussian, a genuine retrain would be told apart by it in 20 % of
audits (the level); measured on fresh retrains at K = 5 it told apart 10 of 192 audits on digits and 12 of 36 on
mnist5k (docs/audit.md, "The MLP probe test"). It withholds certificates: a power cost, never a false accusation.

[INFERRED] No reference code: the ground truth's probe of the attack suite, read in the audit by the audit's own
prediction test. What it costs: ``benchmarks/audit_cost.py``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from ..metrics.mlp_probe import FOLDS, heldout_log_loss
from .config import REFERENCES_UNDER_ATTACK
from .context import AuditContext, ForwardPasses, Pending
from .joint import MIN_REFERENCES, beyond_references


@dataclass(frozen=True)
class ProbeTest:
    """The MLP probe test's outcome: ``value`` (the audited model's held-out log loss, mean over ``seeds``),
    ``references`` (each reference's), ``p`` (one-sided, of a loss as low as the model's among the references'),
    ``level``, ``told_apart``, ``layer``, ``seeds`` (the probe seeds), ``rows`` (forget, retained rows read)."""

    value: float
    references: tuple[float, ...]
    p: float
    level: float
    told_apart: bool
    layer: str
    seeds: tuple[int, ...]
    rows: tuple[int, int]

    def to_dict(self) -> dict:
        return {"value": self.value, "references": list(self.references), "p": self.p, "level": self.level,
                "told_apart": self.told_apart, "layer": self.layer, "seeds": list(self.seeds),
                "rows": {"forget": self.rows[0], "retained": self.rows[1]},
                "statistic": "held-out log loss of an MLP probe of forget vs retained training rows (5 folds, mean "
                             "over the probe seeds); told apart when below the references' one-sided Student-t "
                             "prediction bound on the log scale at the level"}


def applies(config, n_refs: int, sample_level: bool) -> str | None:
    """None when the test runs; else why not (one phrase)."""
    if config.mlp_probe == "off":
        return "turned off (mlp_probe off)"
    if sample_level:
        return "a sample request (no class for a probe to find)"
    if n_refs < MIN_REFERENCES:
        return f"fewer than {MIN_REFERENCES} references"
    if config.mlp_probe == "auto" and n_refs >= REFERENCES_UNDER_ATTACK:
        return f"{n_refs} references (mlp_probe auto runs it below {REFERENCES_UNDER_ATTACK})"
    return None


def probe_seeds(audit_seed: int, n: int) -> tuple[int, ...]:
    """``n`` probe seeds drawn from the audit seed (the same for every model of one audit)."""
    rng = np.random.default_rng([audit_seed, 0x4D4C50])  # "MLP": a stream of its own
    return tuple(int(s) for s in rng.integers(0, 2 ** 31, size=n))


def _rows(n_forget: int, n_retain: int, cap: int, audit_seed: int) -> np.ndarray:
    """Positions of the retained rows read: all, or ``cap`` of them drawn with the audit seed (sorted)."""
    if n_retain <= cap:
        return np.arange(n_retain)
    rng = np.random.default_rng([audit_seed, 0x4D4C51])
    return np.sort(rng.choice(n_retain, size=cap, replace=False))


def probe_jobs(passes: ForwardPasses, ctx: AuditContext) -> Pending | str:
    """One job per model (the audited model's first; the references' from the run's cache when an earlier audit of
    the run computed them), finished as a :class:`ProbeTest`; why not, when it does not apply."""
    config = ctx.config
    why = applies(config, len(passes.refs), ctx.sample_level)
    if why is not None:
        return why
    layer, seed = passes.penultimate, ctx.audit_seed
    outs = [passes.out_u, *passes.out_refs]
    n_f, n_r = len(outs[0]["train_forget"][layer]), len(outs[0]["train_retain"][layer])
    if min(n_f, n_r) < FOLDS:  # a user's min_forget below 5 can let such a model reach erased
        return f"fewer than {FOLDS} training rows of the forget set or of the rest ({n_f}, {n_r}) for its {FOLDS} folds"
    keep = torch.as_tensor(_rows(n_f, n_r, config.mlp_probe_max_retain, seed))
    y = np.concatenate([np.ones(n_f), np.zeros(len(keep))])
    seeds = probe_seeds(seed, config.mlp_probe_seeds)

    def loss(out: dict) -> float:
        x = torch.cat([out["train_forget"][layer].cpu(), out["train_retain"][layer].cpu()[keep]])
        return float(np.mean(heldout_log_loss(x, y, list(seeds))))

    def finish(values: list[float]) -> ProbeTest:
        logs = np.log(np.maximum(values, 1e-12))
        p = beyond_references(-logs)  # lower loss: the class easier to find than in the references
        return ProbeTest(values[0], tuple(values[1:]), p, config.mlp_probe_level, p < config.mlp_probe_level, layer,
                         seeds, (n_f, len(keep)))

    items = [(None if i == 0 else out, ("mlp_probe", layer), partial(loss, out)) for i, out in enumerate(outs)]
    # in SGD steps of the relearning (scheduling only): about one step's time per 2,000 rows of one fit's epoch
    cost = math.ceil((n_f + len(keep)) * 5 * len(seeds) * 120 / 2000.0)
    return Pending(items, finish, cost)

