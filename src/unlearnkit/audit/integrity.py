"""References are evidence: refuse references that cannot be ones, and record where each came from.

The verdict's yardstick is how K models retrained without the forget set differ from each other and from the
original (:mod:`unlearnkit.metrics.equivalence`). A reference that is not such a model breaks it, by mistake or
on purpose (issue 42: the same file given twice counted as two references; the original itself, or a retrain
for another class, was accepted with a warning). Refused, each with one line naming the reference:

* two references with the same weights (sha256 of every parameter and buffer): one model counted twice shrinks
  the references' spread;
* a reference with the original's weights, or with the audited model's (a model audited against itself);
* a reference that still predicts the forget set: its forget accuracy is more than ``not_forgotten_margin``
  points above the other references' mean and significantly so (the ``not_forgotten`` rule's z-test), i.e. it
  would itself be read ``not_forgotten`` against them, and beyond the others' own seed-to-seed spread by that
  margin (:func:`check_predictions`): it was not trained without the forget set (a retrain for another class,
  the original fine-tuned). Two or more such references inflate the others' spread and pass; they then widen
  every interval of the verdict, which certifies less, not more.

:func:`provenance` records, per reference, its sha256 and whatever its caller knows (seed, recipe, the cache
entry, whether unlearnkit trained it or the user supplied it) for audit.json and the report; :func:`scope` says
whether the auditor drew them (every one trained by the audit with a seed drawn from its audit seed) or they were
given (files, a run's seeds, the Python API's models). A certificate against given references holds against the
party audited only if it did not choose them: one that picks 5 of its 8 genuine retrains can choose the five that
certify a model which keeps the class (``benchmarks/reference_choice.py``; docs/audit.md, "References are
evidence"). No test on the references' values tells such a choice apart (each chosen one is a genuine retrain);
only the auditor's drawing them does.

[INFERRED] No reference code.
"""
from __future__ import annotations

import hashlib
import math

import torch
from scipy import stats
from torch import nn

from ..errors import UserError
from ..metrics.equivalence import upper_prediction_bound


def fingerprint(model: nn.Module) -> str:
    """sha256 over every parameter and buffer of ``model`` (names, dtypes, shapes and bytes, in name order)."""
    h = hashlib.sha256()
    state = model.state_dict()
    for name in sorted(state):
        t = state[name]
        if not isinstance(t, torch.Tensor):
            continue
        t = t.detach().cpu().contiguous()
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def check_identities(original: nn.Module, unlearned: nn.Module, refs: list[nn.Module]) -> list[str]:
    """The references' sha256, after refusing duplicates and references equal to the original or the audited
    model (:class:`UserError` naming them, before anything is measured)."""
    shas = [fingerprint(m) for m in refs]
    if len(refs) > 1:
        seen: dict[str, int] = {}
        for i, sha in enumerate(shas):
            if sha in seen:
                raise UserError(f"retrained reference {i + 1} has the same weights as reference {seen[sha] + 1} "
                                f"(sha256 {sha[:12]}): each reference must be a separate retrain (another seed)")
            seen[sha] = i
    for role, model in (("original", original), ("unlearned model", unlearned)):
        sha = fingerprint(model)
        if sha in shas:
            raise UserError(f"retrained reference {shas.index(sha) + 1} has the same weights as the {role} "
                            f"(sha256 {sha[:12]}): a reference must be a model retrained without the forget set")
    return shas


def check_predictions(forget_acc: list[float], n_forget: int, margin: float, confidence: float) -> None:
    """Refuse a reference whose forget accuracy would read ``not_forgotten`` against the other references
    (module docstring), and that lies beyond the spread of genuine retrains as the others show it: more than
    ``margin`` points above the others' one-sided prediction bound at ``confidence`` (Student-t, their own
    standard deviation, with two or more others). Where retrains predict part of the forget set by themselves
    (TARF's mismatch tasks: a fine class forgotten, its rows still labelled by their superclass) their forget
    accuracies spread from seed to seed (digits ``model_mismatch``: 17-42 %), which the binomial test alone
    reads as one reference predicting the forget set; where retrains reach 0 % (a class forgotten) the others'
    spread is 0 and the test is as before. ``forget_acc``: each reference's, in percent."""
    k = len(forget_acc)
    if k < 2 or n_forget < 1:
        return
    for i, acc in enumerate(forget_acc):
        others = [a for j, a in enumerate(forget_acc) if j != i and math.isfinite(a)]
        if not others or not math.isfinite(acc):
            continue
        rest = sum(others) / len(others)
        pu, pr = acc / 100.0, rest / 100.0
        se = math.sqrt(max(pu * (1 - pu), 0.0) / n_forget + max(pr * (1 - pr), 0.0) / n_forget)
        significant = se == 0.0 or (pu - pr) / se > stats.norm.ppf(confidence)
        if acc - upper_prediction_bound(others, confidence) > margin and significant:
            raise UserError(f"retrained reference {i + 1} predicts the forget set (forget accuracy {acc:.1f}% where "
                            f"the other references reach {rest:.1f}%): it was not trained without the forget set "
                            f"(a retrain for another request, or the original fine-tuned?)")


def provenance(shas: list[str], given: list[dict] | None) -> list[dict]:
    """Per reference: its sha256 and what its caller recorded (``given[i]``: seed, recipe, source...);
    ``source`` "user" when nothing says unlearnkit trained it."""
    given = given or [{} for _ in shas]
    out = []
    for sha, extra in zip(shas, given):
        rec = {"sha256": sha, "source": "user"}
        rec.update({k: v for k, v in (extra or {}).items() if v is not None})
        out.append(rec)
    return out


#: the provenance key that says the audit trained the reference with a seed drawn from its audit seed
DRAWN = "drawn_from_audit_seed"


def scope(references: list[dict]) -> dict:
    """Who chose the references (module docstring): ``{"drawn": bool, "drawn_count": int, "note": str}``; drawn
    when every reference's provenance carries :data:`DRAWN` (``audit --train-references``), given otherwise."""
    n_drawn = sum(r.get(DRAWN) is True for r in references)
    drawn = bool(references) and n_drawn == len(references)
    if drawn:
        note = ("every reference was trained by the audit with a seed drawn from its audit seed: the party audited "
                "could not choose them")
    else:
        note = (f"{len(references) - n_drawn} of {len(references)} references were given (files, a run's seeds or "
                f"the Python API's models), not drawn by the audit: a certificate holds against the party audited "
                f"only if it did not choose them (a party that picked 5 of its own 8 or 16 genuine retrains got "
                f"models that keep the class certified on digits; 3 drawn by the audit beside its 5 stopped that, 0 "
                f"of 50); audit --train-references K draws them")
    return {"drawn": drawn, "drawn_count": n_drawn, "note": note}


def scope_evidence(verdict: str, chosen: dict) -> list[str]:
    """The evidence line an ``erased`` verdict carries when the references were given (:func:`scope`); none for
    another verdict (a flag needs no trust in who chose the references: they are genuine retrains either way)."""
    return [f"references: {chosen['note']}"] if verdict == "erased" and not chosen.get("drawn") else []


def reference_seeds(audit_seed: int, k: int, avoid=()) -> list[int]:
    """``k`` distinct training seeds in 0..2**31-2 for references the auditor trains, drawn from the audit seed
    (so unknown to the party audited before the audit, and the same again when the audit is repeated with
    ``--audit-seed``), none of them in ``avoid`` (the seeds of references given as files).

    Why: references whose seeds the party audited can guess (the docs' 1..K, a run's s..s+K-1) it can train
    itself, bit for bit on the same kind of CPU, and tune its model to sit at their very centre on every
    statistic; with seeds it cannot know it can only match retrains like them (the threat model's "owns a
    retrain"). [INFERRED] No reference code."""
    import numpy as np

    rng = np.random.default_rng([int(audit_seed), 0x52454653])  # a stream of its own ("REFS")
    avoid, seeds = {int(s) for s in avoid if s is not None}, []
    while len(seeds) < k:
        s = int(rng.integers(0, 2 ** 31 - 1))
        if s not in avoid and s not in seeds:
            seeds.append(s)
    return seeds
