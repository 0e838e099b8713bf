"""Which rows the audit probes: the test set and the training split, forget vs retain.

Mirage probes the full test set (forgotten class vs the others). On small data that holds few
forgotten examples (digits: 37, mnist5k: 100), so the audit also probes the *training* split's
forget vs retain data, i.e. the very samples the deletion request is about:

* ``test`` (class forgetting only): every test row, ``is_forget`` = the row belongs to
  ``split.test_forget``. Imbalanced, as Mirage (balanced accuracy absorbs it).
* ``train``: class forgetting: ``train_forget`` ∪ ``train_retain`` (imbalanced like ``test``);
  random / indices forgetting: Mirage's sample-level protocol, a 1:1 draw of up to
  ``sample_level_max_per_side`` forget and retained rows (``metrics.sample_level_subsample``,
  seed ``probe_seed``).

Either set is capped at ``max_probe_samples`` rows by a stratified draw (the probes' cost grows
with it; CIFAR's 50k training rows would otherwise cost minutes of probe fitting).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..metrics import sample_level_subsample
from .config import AuditConfig


@dataclass
class AuditData:
    """Rows of one audit data choice: where they come from, and which are forget rows."""

    name: str                 # "test" | "train"
    protocol: str             # one line: how the rows were chosen
    part_rows: dict           # {"test": idx} or {"train_forget": idx, "train_retain": idx} (row order)
    is_forget: np.ndarray     # bool per row, in the order of part_rows' concatenation
    sample_level: bool        # the forget set is a sample (random/indices), not whole classes

    @property
    def n_forget(self) -> int:
        return int(self.is_forget.sum())

    @property
    def n_retain(self) -> int:
        return int((~self.is_forget).sum())

    def features(self, outputs: dict[str, dict[str, Tensor]], layer: str) -> np.ndarray:
        """This data's rows of ``layer`` from :func:`unlearnkit.evaluation.model_outputs`."""
        parts = [outputs[part][layer][torch.as_tensor(idx, dtype=torch.long)]
                 for part, idx in self.part_rows.items()]
        x = torch.cat(parts) if len(parts) > 1 else parts[0]
        return x.double().numpy()

    def summary(self) -> dict:
        return {"protocol": self.protocol, "n_forget": self.n_forget, "n_retain": self.n_retain,
                "sample_level": self.sample_level}


def _stratified_cap(is_forget: np.ndarray, cap: int, seed: int) -> np.ndarray:
    """Row indices: all rows if ``len <= cap``, else a draw of ``cap`` keeping the forget fraction."""
    n = is_forget.size
    if n <= cap:
        return np.arange(n)
    rng = np.random.RandomState(seed)
    f, r = np.flatnonzero(is_forget), np.flatnonzero(~is_forget)
    n_f = int(np.clip(round(cap * f.size / n), min(2, f.size), f.size))
    n_r = min(cap - n_f, r.size)
    return np.sort(np.concatenate([rng.choice(f, n_f, replace=False), rng.choice(r, n_r, replace=False)]))


def is_sample_level(split) -> bool:
    """Random / indices / given-samples forgetting: the forget set shares its classes with the retained data."""
    return getattr(split.spec, "kind", "classes") in ("random", "indices", "samples") or len(split.test_forget) == 0


def test_data(split, config: AuditConfig) -> AuditData | None:
    """The test set, forget vs retain, or None when it holds no forget rows (sample forgetting)."""
    if is_sample_level(split):
        return None
    n = len(split.test)
    mask = np.zeros(n, dtype=bool)
    mask[split.test_forget.index.numpy()] = True
    rows = _stratified_cap(mask, config.max_probe_samples, config.probe_seed)
    capped = "" if rows.size == n else f", stratified draw of {rows.size} of {n} rows"
    return AuditData("test", f"full test set, forgotten classes vs the rest (Mirage){capped}",
                     {"test": rows}, mask[rows], sample_level=False)


def train_data(split, config: AuditConfig) -> AuditData:
    """The training split's forget vs retain rows (see the module docstring)."""
    n_f, n_r = len(split.train_forget), len(split.train_retain)
    is_forget = np.r_[np.ones(n_f, dtype=bool), np.zeros(n_r, dtype=bool)]
    if is_sample_level(split):
        # in the draw's order, forget rows first, as Mirage's ``features[idx]``: its seed-42 split is split 0
        rows = sample_level_subsample(is_forget, config.sample_level_max_per_side, config.probe_seed)
        protocol = (f"training split, 1:1 draw of {int(is_forget[rows].sum())} forget and "
                    f"{int((~is_forget[rows]).sum())} retained samples (Mirage sample-level protocol)")
    else:
        rows = _stratified_cap(is_forget, config.max_probe_samples, config.probe_seed)
        n = is_forget.size
        capped = "" if rows.size == n else f", stratified draw of {rows.size} of {n}"
        protocol = f"training split, forget set vs retained data{capped}"
    f_rows, r_rows = rows[rows < n_f], rows[rows >= n_f] - n_f
    return AuditData("train", protocol, {"train_forget": f_rows, "train_retain": r_rows},
                     is_forget[rows], sample_level=is_sample_level(split))


def audit_data(split, config: AuditConfig) -> dict[str, AuditData]:
    """Every audit data choice of ``split``: ``test`` (class forgetting only), then ``train``."""
    datas = {}
    test = test_data(split, config)
    if test is not None:
        datas["test"] = test
    datas["train"] = train_data(split, config)
    return datas


def choose(datas: dict[str, AuditData], split, config: AuditConfig) -> tuple[str, str]:
    """(name, reason): which data the verdict rests on."""
    test = datas.get("test")
    if config.audit_data != "auto":
        if config.audit_data not in datas:
            return "train", (f"audit_data={config.audit_data!r} was asked for, but the test set holds no "
                             f"forgotten examples (sample-level forgetting): resting on the training split")
        return config.audit_data, f"audit_data={config.audit_data!r} was asked for"
    if test is None:
        return "train", ("sample-level forgetting: the test set holds no forgotten examples, so the probes "
                         "read the training split's forget vs retained samples")
    if test.n_forget >= config.min_test_forget:
        return "test", (f"the test set holds {test.n_forget} forgotten examples (>= min_test_forget="
                        f"{config.min_test_forget}): Mirage's protocol")
    return "train", (f"the test set holds only {test.n_forget} forgotten examples (< min_test_forget="
                     f"{config.min_test_forget}); the training split's {datas['train'].n_forget} forget "
                     f"samples give tighter intervals")
