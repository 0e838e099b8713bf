"""Many L2-regularised logistic regressions on resplits of ONE feature matrix, solved together.

The audit fits Mirage's probe (StandardScaler + ``LogisticRegression(C=1, lbfgs)``,
reference-specs §2.5) on J >= 20 stratified resplits of the same rows, for every model and layer.
Fitted one at a time, each fit gathers and scales its own copy of the rows and runs scipy's
L-BFGS-B on matrix-vector products. Here the J problems share the full matrix X (n x d):

* split j's StandardScaler (mean mu_j, std sigma_j of its training rows, ddof 0, zero variance ->
  1, as sklearn) is folded into the parameters: z_ij = ((x_i - mu_j) / sigma_j) . w_j + b_j
  = x_i . v_j + c_j with v_j = w_j / sigma_j, c_j = b_j - mu_j . v_j, so all J decision vectors
  come from ONE matrix product X V^T (n x J), and every gradient from one more (X^T R);
* each problem minimises sklearn's objective, sum_{i in train_j} log(1 + exp(-s_i z_ij)) +
  ||w_j||^2 / (2C) (intercept not penalised), divided by n_j for conditioning (same minimiser);
* a batched L-BFGS (two-loop recursion per problem, memory ``history``, Armijo backtracking per
  problem) runs until every problem's largest gradient entry is below ``tol``; a problem that has
  converged, or can no longer lower its objective at float64 precision, stops moving.

The objective is strictly convex, so the solution is unique: it agrees with sklearn's lbfgs up to
sklearn's own tolerance (``tol=1e-4``; the default ``tol`` here is tighter). Works on any torch
device (float64), so on a GPU the probes run beside the forward passes. Pure: imports only torch.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class LogisticFits:
    """J fitted probes. ``coef``/``intercept`` in each split's standardised coordinates (as
    sklearn's ``coef_``/``intercept_`` after its StandardScaler); ``decision`` (n x J) the decision
    value of every row under every split's probe; ``n_iter`` iterations used; ``converged`` per split."""

    coef: Tensor
    intercept: Tensor
    mean: Tensor
    scale: Tensor
    decision: Tensor
    n_iter: int
    converged: Tensor


def _scaler(x: Tensor, m: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-split mean / std (ddof 0) of the training rows; sklearn's zero-variance rule."""
    n_j = m.sum(0)                                   # J
    mean = (m.T @ x) / n_j[:, None]                  # J x d
    var = (m.T @ (x * x)) / n_j[:, None] - mean * mean
    scale = var.clamp_min(0).sqrt()
    eps = torch.finfo(x.dtype).eps
    scale = torch.where(scale < 10 * eps, torch.ones_like(scale), scale)
    return mean, scale, n_j


@dataclass
class _Point:
    """Every problem's parameters, objective, gradient and decision values at one iterate."""

    theta: Tensor
    f: Tensor
    g: Tensor
    z: Tensor


class _Objective:
    """The J problems on the shared matrix: split j's sklearn objective on its training rows, with its
    StandardScaler folded into the parameters (module docstring), divided by n_j. Parameters ``theta``
    (J x (d + 1)): the standardised coefficients w_j, then the intercept b_j."""

    def __init__(self, x: Tensor, y: Tensor, train: Tensor, C: float):
        self.x = x.to(torch.float64)
        dev = self.x.device
        self.m = train.to(device=dev, dtype=torch.float64)
        self.y = y.to(device=dev, dtype=torch.float64)
        self.d = self.x.shape[1]
        self.mean, self.scale, self.n_j = _scaler(self.x, self.m)
        self.sign = 2.0 * self.y - 1.0
        self.lam = 1.0 / C

    def __call__(self, theta: Tensor) -> _Point:
        """The objective of every problem at ``theta``, its gradient and the decision values (n x J)."""
        x, m, yf, d, lam, n_j = self.x, self.m, self.y, self.d, self.lam, self.n_j
        w, b = theta[:, :d], theta[:, d]
        v = w / self.scale                                      # J x d
        c = b - (self.mean * v).sum(1)                          # J
        z = x @ v.T + c                                         # n x J
        loss = (torch.nn.functional.softplus(-self.sign[:, None] * z) * m).sum(0)
        f = (loss + 0.5 * lam * (w * w).sum(1)) / n_j
        r = (torch.sigmoid(z) - yf[:, None]) * m                # n x J
        g_v = (x.T @ r).T                                       # J x d
        g_c = r.sum(0)                                          # J
        g_w = (g_v - self.mean * g_c[:, None]) / self.scale + lam * w
        return _Point(theta, f, torch.cat([g_w, g_c[:, None]], 1) / n_j[:, None], z)


class _Curvature:
    """L-BFGS memory of every problem: the last ``history`` pairs (s, y) in a ring whose newest slot is
    (it - 1) % history, and the initial inverse-Hessian scale (1 / max |g| at the start, then s.y / y.y)."""

    def __init__(self, history: int, g: Tensor):
        self.history = history
        self.S = torch.zeros(history, *g.shape, dtype=torch.float64, device=g.device)
        self.Y = torch.zeros_like(self.S)
        self.rho = torch.zeros(history, g.shape[0], dtype=torch.float64, device=g.device)
        self.filled = torch.zeros(history, g.shape[0], dtype=torch.bool, device=g.device)
        self.gam = 1.0 / g.abs().amax(1).clamp_min(1.0)

    def direction(self, g: Tensor, it: int) -> tuple[Tensor, Tensor]:
        """(p, slope = g.p) per problem from the two-loop recursion; -g where that is not a descent
        direction. Slots are used newest-first from position (it - 2) % history."""
        S, Y, rho, filled = self.S, self.Y, self.rho, self.filled
        q = g.clone()
        alphas = []
        order = [(it - 2 - k) % self.history for k in range(self.history)]
        for k in order:
            a = torch.where(filled[k], rho[k] * (S[k] * q).sum(1), torch.zeros_like(rho[k]))
            q = q - a[:, None] * Y[k]
            alphas.append(a)
        r = self.gam[:, None] * q
        for k, a in zip(reversed(order), reversed(alphas)):
            bta = torch.where(filled[k], rho[k] * (Y[k] * r).sum(1), torch.zeros_like(rho[k]))
            r = r + (a - bta)[:, None] * S[k]
        p = -r
        slope = (g * p).sum(1)
        bad = slope >= 0                                        # not a descent direction: use -g
        p = torch.where(bad[:, None], -g, p)
        return p, torch.where(bad, -(g * g).sum(1), slope)

    def push(self, it: int, moved: Tensor, s_vec: Tensor, y_vec: Tensor) -> None:
        """Store iteration ``it``'s step ``s_vec`` and gradient change ``y_vec`` for the problems that
        ``moved`` with positive curvature s.y; a problem that moved without it forgets that slot."""
        sy = (s_vec * y_vec).sum(1)
        keep = moved & (sy > 1e-12)
        slot = (it - 1) % self.history
        self.S[slot] = torch.where(keep[:, None], s_vec, self.S[slot])
        self.Y[slot] = torch.where(keep[:, None], y_vec, self.Y[slot])
        self.rho[slot] = torch.where(keep, 1.0 / sy.clamp_min(1e-300), self.rho[slot])
        self.filled[slot] = torch.where(moved, keep, self.filled[slot])
        self.gam = torch.where(keep, sy / (y_vec * y_vec).sum(1).clamp_min(1e-300), self.gam)


def _armijo(objective: _Objective, at: _Point, p: Tensor, slope: Tensor,
            active: Tensor) -> tuple[_Point, Tensor]:
    """Backtracking line search per problem along ``p``: steps 1, 1/2, 1/4, ... (at most 40) until
    f(theta + t p) <= f + 1e-4 t slope. Returns the new point (a problem with no accepted step, or not
    ``active``, stays where it was) and the mask of the active problems that found no step."""
    step = torch.ones_like(at.f)
    searching = active.clone()
    new = _Point(at.theta, at.f, at.g, at.z)
    for _ in range(40):
        cand = objective(at.theta + step[:, None] * p)
        ok = searching & (cand.f <= at.f + 1e-4 * step * slope)
        new = _Point(torch.where(ok[:, None], cand.theta, new.theta), torch.where(ok, cand.f, new.f),
                     torch.where(ok[:, None], cand.g, new.g), torch.where(ok[None, :], cand.z, new.z))
        searching = searching & ~ok
        if not bool(searching.any()):
            break
        step = torch.where(searching, step * 0.5, step)
    return new, searching


def fit_logistic_resplits(x: Tensor, y: Tensor, train: Tensor, *, C: float = 1.0, tol: float = 1e-7,
                          max_iter: int = 1000, history: int = 10) -> LogisticFits:
    """Fit StandardScaler + L2 logistic regression on the ``train`` rows of each split.

    ``x``: n x d features; ``y``: n labels in {0, 1}; ``train``: n x J boolean masks (column j =
    the training rows of split j). Returns :class:`LogisticFits` with the decision values of all
    rows, so held-out scores are ``decision[test_rows, j]``. The solver is the batched L-BFGS of the
    module docstring (:class:`_Curvature` for the directions, :func:`_armijo` for the steps).
    """
    objective = _Objective(x, y, train, C)
    d = objective.d
    point = objective(torch.zeros(train.shape[1], d + 1, dtype=torch.float64, device=objective.x.device))
    memory = _Curvature(history, point.g)
    stalled = torch.zeros(point.f.shape[0], dtype=torch.long, device=point.f.device)
    active = point.g.abs().amax(1) > tol
    it = 0
    for it in range(1, max_iter + 1):
        if not bool(active.any()):
            it -= 1
            break
        p, slope = memory.direction(point.g, it)
        new, searching = _armijo(objective, point, p * active[:, None], slope, active)
        moved = active & ~searching
        memory.push(it, moved, new.theta - point.theta, new.g - point.g)
        # a problem whose line search failed, or whose step no longer changes the objective, cannot
        # improve further at float64 precision: it stops there (``converged`` tells whether tol was met)
        g_max, new_g_max = point.g.abs().amax(1), new.g.abs().amax(1)
        progress = ((point.f - new.f) > 1e-15 * point.f.abs()) | (new_g_max < 0.9 * g_max)
        stalled = torch.where(progress, torch.zeros_like(stalled), stalled + 1)
        point = new
        active = moved & (stalled < 5) & (new_g_max > tol)
    converged = point.g.abs().amax(1) <= tol
    return LogisticFits(point.theta[:, :d], point.theta[:, d], objective.mean, objective.scale, point.z, it,
                        converged)


def balanced_accuracy_auroc(decision: Tensor, y: Tensor, test: Tensor) -> tuple[Tensor, Tensor]:
    """Per split j: balanced accuracy (percent) of ``decision > 0`` and the AUROC of the decision
    values on the ``test`` rows (n x J mask). The AUROC is the Mann-Whitney U statistic with average
    ranks for ties, i.e. ``roc_auc_score``; balanced accuracy is the mean per-class recall, i.e.
    ``balanced_accuracy_score`` of ``predict`` (which thresholds the decision at 0)."""
    yb = y.to(device=decision.device).bool()
    out_b, out_a = [], []
    for j in range(decision.shape[1]):
        rows = test[:, j].to(decision.device)
        s, t = decision[rows, j], yb[rows]
        pred = s > 0
        out_b.append(100.0 * 0.5 * (pred[t].double().mean() + (~pred[~t]).double().mean()))
        n_p, n_n = int(t.sum()), int((~t).sum())
        order = torch.argsort(s)
        sorted_s = s[order]
        ranks = torch.empty_like(s)
        # average ranks of ties: positions share the mean of their 1-based ranks
        uniq, inverse, counts = torch.unique_consecutive(sorted_s, return_inverse=True, return_counts=True)
        ends = torch.cumsum(counts, 0).double()
        avg = ends - (counts.double() - 1.0) / 2.0
        ranks[order] = avg[inverse]
        out_a.append((ranks[t].sum() - n_p * (n_p + 1) / 2.0) / (n_p * n_n))
    return torch.stack(out_b), torch.stack(out_a)
