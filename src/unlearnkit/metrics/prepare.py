"""One feature preparation behind every statistic the audit reads: dead units, standardisation, whitening.

Every representation statistic (the separability U, the kernel probes, MMD², both head checks, CKA, the
held-out LDA AUROC) sees a layer's features through :func:`prepare`, so one rule decides which units count
and in which coordinates the statistic is computed:

* **dead units** (:func:`live_units`): a unit whose standard deviation is at most :data:`DEAD` times its *own*
  largest magnitude is constant up to rounding and dropped. The cut depends on that unit's scale alone, so no
  rescaling of any unit (by 2**±100 or any factor) moves a unit across it. (A cut relative to the largest
  unit, as the head checks had, let one unit scaled by 2**24 push every informative unit under it.)
* **standardisation**: live units to mean 0, variance 1 (ddof 0) on the rows the preparation is fitted on;
* **whitening** (:func:`inverse_root`): the standardised units' covariance (their correlation matrix) to the
  identity over its eigen-directions above ``rel_tol`` times the largest eigenvalue (a scale-free cut).

So the prepared features of ``x`` and of ``x A`` (A a positive diagonal rescaling times a permutation) are
the same up to float rounding (exactly the same when A's factors are powers of two and it permutes nothing)
and, after whitening, the same up to a rotation for any invertible A (mixing of units): any statistic that
is rotation-invariant in the whitened coordinates (distances, Mahalanobis forms, kernels of distances and
inner products) cannot be moved by a function-preserving reparametrisation of the network.

The rows a preparation is fitted on matter: a unit that is silent on the retained rows but fires on the
forget rows carries the forgotten class, so the head checks fit it on retained rows *and* the shots, never
on retained rows alone.

[INFERRED] No reference code: standard PCA whitening (e.g. Kessy et al. 2018) with a scale-free dead-unit
rule. Pure: torch only.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

#: A unit whose standard deviation is at most this fraction of its own largest |value| is dead.
DEAD = 1e-6
#: Eigen-directions of the standardised covariance below this fraction of the largest are dropped.
REL_TOL = 1e-9


def live_units(std: Tensor, absmax: Tensor) -> Tensor:
    """The dead-unit rule (module docstring): True where ``std`` > :data:`DEAD` x ``absmax`` (and > 0)."""
    return (std > DEAD * absmax) & (std > 0)


def inverse_root(cov: Tensor, rel_tol: float = REL_TOL) -> Tensor:
    """V Λ^{-1/2} over the eigen-directions of the symmetric ``cov`` whose eigenvalue exceeds ``rel_tol`` x the
    largest (columns in ascending eigenvalue order); ``x @ inverse_root(cov)`` has identity covariance there."""
    evals, evecs = torch.linalg.eigh(cov)
    keep = evals > rel_tol * evals.max().clamp_min(1e-300)
    return evecs[:, keep] / evals[keep].sqrt()


@dataclass
class Prepared:
    """A preparation fitted on some rows: ``mean`` and ``std`` of every unit (float64), ``live`` (the units
    kept), and ``rotation`` (live units x kept directions: standardised -> whitened), None when fitted
    without whitening."""

    mean: Tensor
    std: Tensor
    live: Tensor
    rotation: Tensor | None = None

    @property
    def dim(self) -> int:
        """The number of coordinates of :meth:`whitened` (kept directions), or of live units unwhitened."""
        return int(self.rotation.shape[1]) if self.rotation is not None else int(self.live.sum())

    def standardised(self, x: Tensor) -> Tensor:
        """The live units of ``x``, each centred and scaled by the fitted mean and std (float64)."""
        x = _as64(x)
        return (x[:, self.live] - self.mean[self.live]) / self.std[self.live]

    def whitened(self, x: Tensor) -> Tensor:
        """:meth:`standardised` times the whitening rotation (float64, n x :attr:`dim`)."""
        if self.rotation is None:
            raise ValueError("this preparation was fitted without whitening")
        return self.standardised(x) @ self.rotation

    def matrix(self) -> Tensor:
        """W (units x kept directions) with ``(x − mean) @ W`` = :meth:`whitened` (dead units' rows 0): the
        whitening as one linear map of the raw features."""
        w = torch.zeros(self.mean.numel(), self.dim, dtype=torch.float64, device=self.mean.device)
        w[self.live] = self.rotation / self.std[self.live, None]
        return w


def _as64(x) -> Tensor:
    x = torch.as_tensor(x)
    return torch.nan_to_num(x.to(torch.float64), nan=0.0, posinf=0.0, neginf=0.0)


def prepare(x, *, whiten: bool = True, rel_tol: float = REL_TOL) -> Prepared:
    """The preparation (module docstring) fitted on the rows of ``x`` (n x d; non-finite values read as 0)."""
    x = _as64(x)
    mean = x.mean(0)
    std = (x - mean).pow(2).mean(0).sqrt()
    live = live_units(std, x.abs().amax(0))
    prep = Prepared(mean, std, live)
    if whiten:
        z = (x[:, live] - mean[live]) / std[live]
        prep.rotation = (inverse_root(z.T @ z / x.shape[0], rel_tol) if z.shape[1] else
                         torch.zeros(0, 0, dtype=torch.float64, device=x.device))
    return prep


def whitened(x, rel_tol: float = REL_TOL) -> Tensor:
    """The rows of ``x`` whitened by their own preparation: ``prepare(x).whitened(x)`` (float64, n x p)."""
    return prepare(x, rel_tol=rel_tol).whitened(x)
