"""The attack suite the audit is scored on (issue 42): adaptive forgers against the certificate, with ground truth.

    .venv/bin/python benchmarks/attack_suite.py --datasets digits,mnist5k --seeds 0,1,2 --references 5,8
    .venv/bin/python benchmarks/attack_suite.py --quick        # digits, seed 0, K = 5, a few families: a smoke run

The adversary has read unlearnkit's code and owns a retrain of its own (seed 1000 + s, a seed the auditor never
uses); the auditor's references are what ``unlearnkit run --seed s --references K`` trains (retrains of seeds
s .. s + K - 1), the original is seed s (small_cnn, class ``--forget-class`` forgotten, the default recipe; all
through the project's model cache). Families (each built from the seed-s original and the attacker's retrain
R*; trained on the training split only):

* ``masked``: the original with the class's head row zeroed and its bias -1e4 (an output mask);
* ``soft_masked``: the original with the class's bias lowered by 10 (a soft mask: the head row still points at
  the class);
* ``bn_masked``: the forgetting in stale BatchNorm statistics: the running means of the 48 block3 channels most
  specific to the class pushed 10 standard deviations up, so after BatchNorm and ReLU they are silent and the
  class is no longer predicted;
* ``head_retrained``: the original's body with a head re-fitted on the retained rows;
* ``output_forger``: the original with the class's head row re-fitted (least squares on the penultimate
  features) so that its logit-scaled confidence φ on every training row matches R*'s: the output test's mean
  passed by construction;
* ``distiller``: a fine-tune of the original on the retained rows (cross-entropy) and on the forget rows
  distilling R*'s outputs (KL): outputs like R*'s example by example;
* ``matcher``: the distiller plus, at every audited layer, the forget-vs-retained separability (Mahalanobis) and
  the kernel probes' held-out separation (RBF and degree-2 kernel Fisher discriminants on landmark rows) matched
  to R*'s on the same batch rows, while a jointly trained MLP probe keeps the class decodable at the penultimate
  layer (the issue's statistic-matching forger, against every number the verdict reads);
* ``cov_keeper``: the same with the kept read-out a quadratic probe (the class kept in second moments, means
  matched);
* ``hardened``: the matcher also trained against the audit's relearning: every other step a first-order
  (FOMAML) step on the gap between its own and R*'s relearning (mean log-odds and mean probability of the
  class on held-out forget rows) under a random shot draw, learning rate and budget of the audit's sweep (the
  attacker knows the procedure, not the seed), on periodically canonicalised weights (the audit relearns
  canonical copies);
* ``hardened_keep3``, ``hardened_keep10``: ``hardened`` with its kept probe's loss weighted 3 and 10 times (the
  attacker pushing to keep more of the class while passing every check: where the certificate's boundary lies);
* ``hardened_indist``, ``hardened_indist_keep3``: against the rule that a model told apart from the references
  (beyond their prediction bound, by less than the margin) is not ``erased``: ``hardened`` (kept probe weighted 1
  and 3) also matching the output's mean confidence φ on each batch's forget rows to R*'s, and handed in with its
  BatchNorm naturalised (:func:`naturalise_bn`: running statistics set to the retained rows' own, function
  unchanged) rather than canonical, so that re-estimating BatchNorm changes almost nothing, as for a model
  trained normally;
* ``hardened_tight``, ``hardened_tight_keep3``: against the told-apart rule at its own level (0.2, four times the
  flag's): ``hardened_indist`` with every matching term (each layer's separability and kernel probes, the output's
  mean confidence) weighted four times as much, the attacker pulling every statistic the audit reads closer to its
  own retrain's while keeping the class;
* ``hardened_tighter``: against the recommendation of 16 references on digits (docs/audit.md): ``hardened_tight``
  with the matching terms weighted four times more again (16 times ``hardened_indist``'s);
* ``hardened_joint``: against the joint told-apart test (``audit/joint.py``: every statistic a little beyond the
  references, together, is told apart): ``hardened_tight`` with its separability and kernel-probe matching
  computed, every step, on every forget row and 512 retained rows with the audit's probe geometry (200
  landmarks, 0.3 held out) instead of the small batch: the attacker matching the estimator the audit reads
  (the earlier families sat 4-6 references' standard deviations above them on the audit's kernel probes; with
  ``hardened_tighter``'s weight the wide matching did not train: retained cross-entropy 0.8-1.7 after 12 epochs);
* ``hardened_marginal``: against the Student-t testability of 2026-12-07 (docs/audit.md, "The rule"): a statistic
  whose original sits 11.2-15.6 of the references' standard deviations above them at K = 5 is read by the
  told-apart tests but need not be certified, and on small_cnn those are mostly block3's. ``hardened_tight``'s
  terms with the kept probe on block3's pooled features and no matching at block3: the class kept where the
  audit only tells apart, everything else pulled to the attacker's own retrain. Measured on digits seeds 0-5:
  its block3 probe did not train (loss about 0.8 a batch, flat over all 12 epochs, 0.92 at chance), so it keeps
  the class about as much as the other ``hardened`` families do (two of six below all 48 genuine retrains on the
  ground truth's penultimate probe), not more at block3: a weak adaptive attack;
* ``hardened_block3``: ``hardened_marginal`` made to hold block3: its kept probe (behind a fixed standardisation)
  trained to convergence on the original's own block3 features before the attack starts, then trained on with
  its own learning rate (1e-3) and weighted 3 times (:meth:`Attack._warm_start`). On digits seeds 0-5 its probe
  loss in the last epoch was 0.15-0.36 a batch (0.92 at chance; ``hardened_marginal``'s stayed near 0.8): the
  class decodable at block3 all along, everything else pulled to the attacker's own retrain. By a ground-truth
  MLP probe at block3 (``gt_pool.py --layer block3``) it keeps no more there than ``hardened_marginal`` (kept
  share 0.09-0.29 against 0.10-0.27): genuine retrains tell class 3 apart at block3 nearly as well;
* ``hardened_tight_util``, ``hardened_joint_util``: ``hardened_tight`` and ``hardened_joint`` with utility as a
  constraint, as an attacker who must ship a working model would set it: the retained cross-entropy's weight rises
  by dual ascent (step 2, from 1 up to 100) while a batch's retained cross-entropy is above 0.1 (:data:`UTILITY_CE`).
  Why: on mnist5k the tight families read `collapsed` (retained accuracy 53-88 % on seeds 0-2, the original's
  98.7-98.9 %), which tests the utility axis, not the audit's certificate; with the constraint 97.4-98.1 %;
* ``hardened_centre``, ``hardened_centre_keep3``: ``hardened_joint_util`` (kept probe weighted 1 and 3) by an
  attacker who owns four retrains (seeds 1000 + s and :data:`CENTRE_OFFSETS` + s), not one, and aims every target
  at their centre: each separability and kernel probe matched to the four retrains' mean on the same rows, the
  output distilled from their geometric mean, the forget rows' mean confidence and the relearning curves matched
  to their means. Why: one retrain's statistics sit about one retrains' standard deviation from the retrains'
  centre, so a model that matches it is as far from the auditor's references as a genuine retrain; the centre of
  four is half as far, and the slack is room to keep more (``_keep3`` spends it) before the joint test or a
  single statistic's told-apart test sees the model;
* ``hardened_centre_canon``: ``hardened_centre`` with its relearning targets read on the four retrains' canonical
  copies, as the audit relearns them. Every earlier ``hardened`` family matched its retrain's relearning on a
  plain copy, which relearns otherwise (digits, 5 steps at lr 0.01: mean φ −3.5 on a retrain, −5.5 on its
  canonical copy), and the centre families were told apart mostly on relearning. Measured on digits seeds 0-5
  (docs/audit.md): one seed's keeper (kept share 0.31) read `erased` in 5 of its 10 audits at K = 5 and in none
  of 10 at K = 8: an attack that wins at K = 5;
* ``hardened_centre_hide``: against an audit that would also read the ground truth's MLP probe (docs/audit.md,
  "What five references can see": the candidate that closes K = 5 on digits): ``hardened_centre_canon`` also
  pushed, with weight :data:`HIDE_WEIGHT`, until an adversary MLP probe (the audit's kind: 64 ReLU units on
  standardised penultimate features, fitted afresh each epoch and tracked every third step) finds the class no
  better than a fresh probe does in the attacker's four retrains (:meth:`Attack._hide_loss`), while its own kept
  probe is to keep finding it. Its adversary is scored on the rows it was fitted on, so it reads a loss near 0
  throughout and the push never stops;
* ``hardened_centre_hide_held``: the same with the adversary fitted on half the forget rows (and 512 retained rows)
  and scored on the others, against a target read the same way on the attacker's four retrains
  (:meth:`Attack._held_target`): the push stops where the retrains are, by the attacker's own held-out measure;
* ``hardened_centre_canon_long``: ``hardened_centre_canon`` trained twice as long (24 epochs on digits, 12 on
  mnist5k). Why: on mnist5k every centre family read `suppressed` on the output agreement after its six epochs (the
  model still ordered the forget examples as the original, kept 0.50-0.64), where the digits ones, trained twelve,
  passed it; an attacker is not held to six epochs. Measured (docs/audit.md): on mnist5k the three that were built
  (seed 2's diverged in its first epoch) keep the class and are still flagged on the output agreement; on digits
  the longer training cost the attacker the class;
* ``kept_stage``: the original's first two stages frozen, the rest fine-tuned as the distiller;
* ``mean_matched``: issue 28's attack (``attack_mean_matched.mean_matched``);
* every family's bit-identical copies (``attack_reparam.copies``: units rescaled by powers of two up to 2^±120,
  permuted, both): each must get the same verdict and the same deciding numbers as its parent.

Ground truth (measured on examples the audit never reads as relearning shots, with draws the audit never uses):
plain SGD on the model *as given* (lr 0.01, momentum 0.9, eval mode, 5 shots of every class, 3 draws) and the
accuracy on the test images of the forgotten class after 10, 20 and 50 steps; and a held-out MLP probe
(``mlp_probe.probe``: scikit-learn MLP, 5 folds) of forget vs retained training rows at the penultimate layer. A
model **keeps the class** when its relearning exceeds every genuine retrain's of the dataset by more than
``--gt-margin`` points at some budget, or its probe's held-out log loss is below ``--gt-probe`` times the
smallest of the genuine retrains'. Genuine held-out retrains (seeds 100 + 2s, 101 + 2s: no reference has them)
measure the power. Each row also records the model's kept share by the ground truth's probe (:func:`kept_share`:
0 a genuine retrain on average, 1 the original), and the run prints the ``erased`` rate by kept share beside the
genuine retrains' (:func:`boundary`): where the certificate's boundary lies against its margin.

Every audit draws a fresh audit seed (``secrets``), shared by the models audited against the same references
(the references' relearning is cached, as in a run); it is recorded. Prints one row per audit, then per family
the false-``erased`` rate among the models that keep the class (exact Clopper-Pearson 95 % bounds) and the
genuine retrains' ``erased`` rate; writes ``--out`` (JSON, atomically, after every seed: an interrupted run keeps
what it finished). Attacked models are cached under ``--cache`` (one file per family, dataset and seed).
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import secrets
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "attack_suite.json"
MODEL = "small_cnn"
DEFAULT_CACHE = Path.home() / ".cache" / "unlearnkit" / "attacks"
FAMILIES = ("masked", "soft_masked", "bn_masked", "head_retrained", "output_forger", "distiller", "matcher",
            "cov_keeper", "hardened", "kept_stage", "mean_matched", "hardened_keep3", "hardened_keep10",
            "hardened_indist", "hardened_indist_keep3", "hardened_tight", "hardened_tight_keep3", "hardened_tighter",
            "hardened_joint", "hardened_marginal", "hardened_block3", "hardened_tight_util", "hardened_joint_util",
            "hardened_centre", "hardened_centre_keep3", "hardened_centre_canon", "hardened_centre_hide",
            "hardened_centre_hide_held", "hardened_centre_canon_long")
#: the retained cross-entropy a batch the ``_util`` families hold to (dual ascent on its weight)
UTILITY_CE = 0.1
#: ``hardened_centre_hide``'s weight on hiding from a fresh MLP probe (:meth:`Attack._hide_loss`)
HIDE_WEIGHT = 2.0
#: the ``hardened_centre`` families' attacker owns these retrains beside its first (seed 1000 + s): seeds offset + s
CENTRE_OFFSETS = (2000, 3000, 4000)
GT_STEPS = (10, 20, 50)
GT_SEEDS = (917_000, 917_001, 917_002)  # the ground truth's shot draws: never an audit's


def sibling(name: str):
    """``benchmarks/<name>.py`` imported once (benchmarks is not a package)."""
    import importlib.util

    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def model_of(kind: str, split, seed: int):
    """The cached ``original`` / ``retrain`` small_cnn of ``seed``."""
    from unlearnkit.training import default_recipe, reference_model

    recipe = default_recipe(split.dataset.name, MODEL)
    return reference_model(kind, split, MODEL, recipe, seed=seed, progress=False).model.eval()


# ------------------------------------------------------------------------------------------ attack building blocks

def _rows(data) -> tuple[torch.Tensor, torch.Tensor]:
    return data.normalize(data.x), data.y


def _pooled(model, layers, x) -> tuple[torch.Tensor, dict]:
    """(logits, pooled features of ``layers``) with the graph, eval mode."""
    import unlearnkit as uk

    model.eval()
    with uk.capture(model, layers, detach=False) as feats:
        logits = model(x)
    return logits, dict(feats)


def _log_mahalanobis(f: torch.Tensor, r: torch.Tensor, ridge: float = 1e-2) -> torch.Tensor:
    """log of the forget-vs-retained Mahalanobis D² in the batch (pooled within covariance, a ridge)."""
    dm = f.mean(0) - r.mean(0)
    c = torch.cat([f - f.mean(0), r - r.mean(0)])
    s = c.T @ c / len(c)
    s = s + ridge * s.diagonal().mean().clamp_min(1e-8) * torch.eye(len(s))
    return torch.log((dm @ torch.linalg.solve(s, dm)).clamp_min(1e-8))


def _log_kfd(f: torch.Tensor, r: torch.Tensor, kernel: str, g: torch.Generator, ridge: float = 1e-2,
             landmarks: int = 64, held: float = 0.5) -> torch.Tensor:
    """A differentiable kernel Fisher discriminant's held-out log d'² in the batch: the batch whitened, a part of
    each group (1 − ``held``) fits the discriminant on up to ``landmarks`` landmark features, the rest is read (as
    the audit's probe, which holds out 0.3 and uses 200 landmarks)."""
    x = torch.cat([f, r])
    y = torch.cat([torch.ones(len(f), dtype=torch.bool), torch.zeros(len(r), dtype=torch.bool)])
    xc = x - x.mean(0)
    cov = xc.T @ xc / len(x)
    cov = cov + 1e-3 * cov.diagonal().mean().clamp_min(1e-8) * torch.eye(x.shape[1])
    chol = torch.linalg.cholesky(cov)  # z = xc L^-T: white, and stable to differentiate (unlike eigh)
    z = torch.linalg.solve_triangular(chol, xc.T, upper=False).T
    perm = torch.randperm(len(z), generator=g)
    n_fit = int(round(len(z) * (1.0 - held)))
    half = torch.zeros(len(z), dtype=torch.bool)
    half[perm[:n_fit]] = True
    marks = z[perm[: min(landmarks, n_fit)]]
    if kernel == "rbf":
        d2 = torch.cdist(z[half], z[half]).pow(2)
        s2 = d2.detach().median().clamp_min(1e-6)
        phi = torch.exp(-torch.cdist(z, marks).pow(2) / (2 * s2))
    else:
        phi = (z @ marks.T / z.shape[1] + 1) ** 2
    fit_f, fit_r = phi[half & y], phi[half & ~y]
    if len(fit_f) < 2 or len(fit_r) < 2:
        return torch.zeros(())
    c = torch.cat([fit_f - fit_f.mean(0), fit_r - fit_r.mean(0)])
    sw = c.T @ c / len(c)
    w = torch.linalg.solve(sw + ridge * sw.diagonal().mean().clamp_min(1e-8) * torch.eye(len(sw)),
                           fit_f.mean(0) - fit_r.mean(0))
    s = phi[~half] @ w
    yh = y[~half]
    sf, sr = s[yh], s[~yh]
    if len(sf) < 2 or len(sr) < 2:
        return torch.zeros(())
    pooled = ((len(sf) - 1) * sf.var() + (len(sr) - 1) * sr.var()) / (len(sf) + len(sr) - 2)
    return torch.log(((sf.mean() - sr.mean()) ** 2 / pooled.clamp_min(1e-8)).clamp_min(1e-8))


def _phi(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per row log(p_y / (1 − p_y)) (differentiable)."""
    ly = logits.gather(1, y[:, None])[:, 0]
    other = logits.masked_fill(F.one_hot(y, logits.shape[1]).bool(), float("-inf"))
    return ly - torch.logsumexp(other, 1)


def _canonical_or_plain(model):
    """The audit's canonical copy of ``model`` (:func:`unlearnkit.audit.canonical.canonicalize`), or ``model`` where
    it cannot be canonicalised."""
    from unlearnkit.audit.canonical import canonicalize

    canon, why = canonicalize(model)
    return (canon if why is None else model).eval()


def _relearn_phi(model, shots: tuple, held: tuple, lr: float, steps: int):
    """First-order relearning simulation: a copy relearnt ``steps`` SGD steps (momentum 0.9) on ``shots``; returns
    (the copy, mean φ and mean probability of the true class of ``held`` under it, with the graph to the copy's
    weights)."""
    m = copy.deepcopy(model).eval()
    for p in m.parameters():
        p.requires_grad_(True)
    opt = torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9)
    x, y = shots
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(m(x), y).backward()
        opt.step()
    opt.zero_grad(set_to_none=True)
    phi = _phi(m(held[0]), held[1]).clamp(-30, 30)
    return m, phi.mean(), torch.sigmoid(phi).mean()


class Attack:
    """The fine-tuning attacks' shared loop (module docstring); which terms apply is set by the family."""

    def __init__(self, original, retrain, split, *, seed: int, match: bool, keep: str | None, harden: bool,
                 freeze: tuple[str, ...] = (), epochs: int = 12, lr: float = 3e-4, keep_weight: float = 1.0,
                 indist: bool = False, match_weight: float = 0.5, wide: bool = False, keep_layer: str = "penultimate",
                 unmatched: tuple[str, ...] = (), warm_probe: bool = False, utility: float | None = None,
                 more_teachers: tuple = (), canonical_targets: bool = False, hide_mlp: float = 0.0,
                 hide_held: bool = False, log=None) -> None:
        import unlearnkit as uk

        self.model = copy.deepcopy(original).eval()
        # ``more_teachers``: more retrains of the attacker's own; every target is then their centre (the mean of
        # each statistic over them), not one retrain's values
        self.teachers = tuple(t.eval() for t in (retrain, *more_teachers))
        self.teacher = self.teachers[0]
        # ``canonical_targets``: the relearning targets read on the teachers' canonical copies, as the audit relearns
        # every reference (plain copies relearn otherwise: on digits 5 steps at lr 0.01 read a mean φ of -3.5 on a
        # retrain and -5.5 on its canonical copy)
        self.relearn_teachers = tuple(_canonical_or_plain(t) for t in self.teachers) if canonical_targets else \
            self.teachers
        self.split, self.seed, self.match, self.keep, self.harden = split, seed, match, keep, harden
        self.layers = uk.audit_layers(self.model)
        self.freeze, self.epochs, self.lr, self.keep_weight = freeze, epochs, lr, keep_weight
        self.indist, self.match_weight, self.wide = indist, match_weight, wide
        self.keep_layer, self.unmatched = keep_layer, unmatched
        # ``utility``: the retained cross-entropy a batch may reach; its weight rises by dual ascent while above it
        self.utility, self.ce_weight = utility, 1.0
        self.log = log or (lambda text: print(text, flush=True))
        self.g = torch.Generator().manual_seed(seed)
        self.xf, self.yf = _rows(split.train_forget)
        self.xr, self.yr = _rows(split.train_retain)
        self._t_rows = None  # the teachers' logits and pooled features of every row (:meth:`_teacher_out`)
        with torch.no_grad():
            width = _pooled(self.model, self.layers, self.xf[:2])[1][keep_layer].shape[1]
        self.warm_probe = warm_probe
        # ``hide_mlp``: the weight of hiding the class from an MLP probe fitted afresh (:meth:`_hide_loss`)
        # ``hide_held``: the adversary scored on rows it was not fitted on, and the target that same score on the
        # teachers (:meth:`_held_target`), so that the push stops where the retrains are
        self.hide_mlp, self.hide_held, self.adversary, self.hide_target = hide_mlp, hide_held, None, None
        if hide_mlp:
            self.hide_target = self._held_target() if hide_held else self._teachers_probe_loss()
        if keep == "mlp":
            self.probe = torch.nn.Sequential(torch.nn.Linear(width, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
            if warm_probe:
                self._warm_start(width)
        elif keep == "quadratic":
            self.probe = torch.nn.Linear(width, 1)  # on squared, centred features: second moments
        else:
            self.probe = None

    def _teachers_probe_loss(self) -> float:
        """The teachers' mean held-out log loss of the ground truth's MLP probe at the penultimate layer
        (``mlp_probe.probe_batched``, one probe seed of the attacker's own): the level the model is to reach."""
        y = np.concatenate([np.ones(len(self.xf)), np.zeros(len(self.xr))])
        losses = []
        for _, feats in self._teacher_out(None, torch.arange(len(self.xr))):  # every row, the teachers' cache
            z = feats["penultimate"]
            probe = sibling("mlp_probe").probe_batched(z.double().numpy(), y, [7_000 + self.seed])
            losses.append(float(np.mean(probe)))
        self.log(f"    {self.seed} the teachers' fresh MLP probe loss: {np.mean(losses):.4f} (each {losses})")
        return float(np.mean(losses))

    def _held_target(self, draws: int = 2) -> float:
        """The adversary's held-out score (:meth:`_hide_score` with ``hide_held``) on each teacher's penultimate
        features, fitted as :meth:`_fit_adversary` fits it on the model, averaged over the teachers and ``draws``
        fits: the level a genuine retrain reads under this very adversary."""
        model, scores = self.model, []
        for j, t in enumerate(self.teachers):
            self.model = t
            for _ in range(draws):
                self._fit_adversary(fresh=True)
                with torch.no_grad():
                    fb, rb = torch.arange(len(self.xf)), torch.randperm(len(self.xr), generator=self.g)[:1024]
                    self._hide_score(self._teacher_out(fb, rb)[j][1]["penultimate"], fb, rb)
                scores.append(self.last_adversary)
        self.model = model
        self.adversary = None
        self.log(f"    {self.seed} the adversary's held-out loss on the teachers: {np.mean(scores):.4f} "
                 f"({min(scores):.4f}-{max(scores):.4f})")
        return float(np.mean(scores))

    def _fit_adversary(self, fresh: bool, steps: int = 100) -> None:
        """The adversary: an MLP probe (64 ReLU units, standardised inputs) of forget vs retained rows on the model's
        current penultimate features (every forget row, 512 retained rows), fitted anew (``fresh``) or from where it
        was, 100 full-batch Adam steps at lr 1e-2: the probe an auditor would fit, tracking the model."""
        rb = torch.randperm(len(self.xr), generator=self.g)[:512]
        fa = torch.randperm(len(self.xf), generator=self.g)[:len(self.xf) // 2] if self.hide_held else \
            torch.arange(len(self.xf))
        self.adv_rows = (fa, rb)  # the rows it is fitted on: ``hide_held`` scores it on the others
        with torch.no_grad():
            z = _pooled(self.model, self.layers, torch.cat([self.xf[fa], self.xr[rb]]))[1]["penultimate"]
            self.adv_mu, self.adv_sd = z.mean(0), z.std(0).clamp_min(1e-6)
            z = (z - self.adv_mu) / self.adv_sd
        y = torch.cat([torch.ones(len(fa)), torch.zeros(len(rb))])
        if fresh or self.adversary is None:
            self.adversary = torch.nn.Sequential(torch.nn.Linear(z.shape[1], 64), torch.nn.ReLU(),
                                                 torch.nn.Linear(64, 1))
        self.adversary.requires_grad_(True)
        opt = torch.optim.Adam(self.adversary.parameters(), lr=1e-2)
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            F.binary_cross_entropy_with_logits(self.adversary(z)[:, 0], y).backward()
            opt.step()
        self.adversary.requires_grad_(False)

    def _hide_score(self, pen: torch.Tensor, fb: torch.Tensor, rb: torch.Tensor) -> torch.Tensor:
        """The adversary's loss on the batch's rows ``fb`` (forget) and ``rb`` (retained), whose features ``pen``
        are in that order, weighted to the two parts' shares of the training split; with ``hide_held``, on the
        rows it was not fitted on only."""
        z = (pen - self.adv_mu) / self.adv_sd
        nf = len(fb)
        per = F.binary_cross_entropy_with_logits(self.adversary(z)[:, 0],
                                                 torch.cat([torch.ones(nf), torch.zeros(len(pen) - nf)]),
                                                 reduction="none")
        keep_f, keep_r = torch.ones(nf, dtype=torch.bool), torch.ones(len(rb), dtype=torch.bool)
        if self.hide_held:
            keep_f, keep_r = ~torch.isin(fb, self.adv_rows[0]), ~torch.isin(rb, self.adv_rows[1])
        share = len(self.xf) / (len(self.xf) + len(self.xr))
        loss = share * per[:nf][keep_f].mean() + (1 - share) * per[nf:][keep_r].mean()
        self.last_adversary = float(loss.detach())
        return loss

    def _hide_loss(self, pen: torch.Tensor, fb: torch.Tensor, rb: torch.Tensor) -> torch.Tensor:
        """(log ℓ_target − log ℓ)² where the adversary's loss ℓ (:meth:`_hide_score`) is below the teachers' level
        ℓ_target: the model pushed until a fresh MLP probe finds the class no better than in the attacker's
        retrains, while its own kept probe (``keep``) is to keep finding it."""
        loss = self._hide_score(pen, fb, rb)
        return torch.relu(math.log(self.hide_target) - torch.log(loss)) ** 2

    def _warm_start(self, width: int, steps: int = 600) -> None:
        """The kept probe trained to convergence on the original's own ``keep_layer`` features (every forget row,
        every retained row; Adam, lr 1e-2, full batch), behind a fixed standardisation by those features' mean
        and sd: from the first step of the attack its loss says how much of the class the layer still holds (a
        probe started from scratch at block3 did not train within the attack: ``hardened_marginal``)."""
        with torch.no_grad():
            ff = _pooled(self.model, self.layers, self.xf)[1][self.keep_layer]
            fr = _pooled(self.model, self.layers, self.xr)[1][self.keep_layer]
            both = torch.cat([ff, fr])
            mu, sd = both.mean(0), both.std(0).clamp_min(1e-6)
        scale = torch.nn.Linear(width, width)
        with torch.no_grad():
            scale.weight.copy_(torch.diag(1.0 / sd))
            scale.bias.copy_(-mu / sd)
        scale.requires_grad_(False)
        self.probe = torch.nn.Sequential(scale, *self.probe)
        opt = torch.optim.Adam([p for p in self.probe.parameters() if p.requires_grad], lr=1e-2)
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = self._probe_loss(ff, fr)
            loss.backward()
            opt.step()
        chance = 2 * math.log(2) * len(fr) / (len(ff) + len(fr))  # the balanced loss of p = 1/2 everywhere
        self.log(f"    {self.seed} kept probe at {self.keep_layer} warm-started on the original: loss "
                 f"{loss.item():.3f} ({chance:.3f} at chance)")

    @torch.no_grad()
    def _teacher_out(self, fb: torch.Tensor | None, rb: torch.Tensor) -> list[tuple[torch.Tensor, dict]]:
        """Each teacher's (logits, pooled features) of forget rows ``fb`` (None: all) then retained rows ``rb``,
        as :func:`_pooled` on those rows would give them (eval mode: a row's values do not depend on its batch);
        the teachers are fixed, so every row is passed once and kept."""
        if self._t_rows is None:
            def rows(t, x):
                got = [_pooled(t, self.layers, x[i:i + 512]) for i in range(0, len(x), 512)]
                return torch.cat([g[0] for g in got]), {k: torch.cat([g[1][k] for g in got]) for k in got[0][1]}
            self._t_rows = [(rows(t, self.xf), rows(t, self.xr)) for t in self.teachers]
        fb = torch.arange(len(self.xf)) if fb is None else fb
        return [(torch.cat([f[0][fb], r[0][rb]]), {k: torch.cat([f[1][k][fb], r[1][k][rb]]) for k in f[1]})
                for f, r in self._t_rows]

    def _probe_loss(self, ff: torch.Tensor, fr: torch.Tensor) -> torch.Tensor:
        x = torch.cat([ff, fr])
        if self.keep == "quadratic":
            x = (x - fr.mean(0).detach()) ** 2
            x = x / x.detach().mean(0).clamp_min(1e-6)
        target = torch.cat([torch.ones(len(ff)), torch.zeros(len(fr))])
        pos = torch.tensor(len(fr) / max(len(ff), 1))
        return F.binary_cross_entropy_with_logits(self.probe(x)[:, 0], target, pos_weight=pos)

    def _shots(self):
        yf, yr = self.yf.numpy(), self.yr.numpy()
        rng = np.random.default_rng(int(torch.randint(0, 2 ** 31, (1,), generator=self.g)))
        f = rng.choice(len(yf), 5, replace=False)
        r = np.concatenate([rng.choice(np.flatnonzero(yr == c), 2, replace=False) for c in np.unique(yr)])
        held = np.setdiff1d(np.arange(len(yf)), f)
        x = torch.cat([self.xf[f], self.xr[r]])
        y = torch.cat([self.yf[f], self.yr[r]])
        return (x, y), (self.xf[held], self.yf[held])

    def _harden_step(self) -> float:
        """One FOMAML step on (own relearnt φ − R*'s relearnt φ)² under a random draw, lr and budget."""
        shots, held = self._shots()
        lr = float([0.01, 0.005][int(torch.randint(0, 2, (1,), generator=self.g))])
        steps = int([5, 10, 20, 40][int(torch.randint(0, 4, (1,), generator=self.g))])
        got = [_relearn_phi(t, shots, held, lr, steps)[1:] for t in self.relearn_teachers]
        target = torch.stack([g[0].detach() for g in got]).mean()
        target_p = torch.stack([g[1].detach() for g in got]).mean()
        adapted, phi, p = _relearn_phi(self.model, shots, held, lr, steps)
        loss = (phi - target.detach()) ** 2 + 100.0 * (p - target_p.detach()) ** 2
        grads = torch.autograd.grad(loss, list(adapted.parameters()), allow_unused=True)
        for p, gr in zip(self.model.parameters(), grads):
            if gr is not None and p.requires_grad:
                p.grad = gr if p.grad is None else p.grad + gr
        return float(loss.detach())

    def _canonicalise(self) -> None:
        from unlearnkit.audit.canonical import canonicalize

        canon, why = canonicalize(self.model)
        if why is None:
            self.model = canon
            self.opt = self._optimizer()

    def _optimizer(self):
        for name, p in self.model.named_parameters():
            p.requires_grad_(not any(name.startswith(f) for f in self.freeze))
        groups = [{"params": [p for p in self.model.parameters() if p.requires_grad]}]
        if self.probe is not None:  # a warm-started probe keeps pace with the features it reads (lr 1e-3)
            groups.append({"params": [p for p in self.probe.parameters() if p.requires_grad],
                           "lr": 1e-3 if self.warm_probe else self.lr})
        return torch.optim.Adam(groups, lr=self.lr)

    def _epoch(self, step: int) -> tuple[np.ndarray, int]:
        """One pass over the retained rows (batches of 128, each with 64 forget rows); the four losses' sums."""
        n_r = len(self.xr)
        sums = np.zeros(4)
        order = torch.randperm(n_r, generator=self.g)
        for i in range(0, n_r, 128):
            rb = order[i:i + 128]
            fb = torch.randperm(len(self.xf), generator=self.g)[:64]
            xr, yr, xf = self.xr[rb], self.yr[rb], self.xf[fb]
            x = torch.cat([xf, xr])
            logits, feats = _pooled(self.model, self.layers, x)
            nf = len(xf)
            t_out = self._teacher_out(fb, rb)
            # several teachers: distil their geometric mean (the mean of their log-probabilities, renormalised)
            t_logp = torch.stack([F.log_softmax(t[0][:nf], 1) for t in t_out]).mean(0)
            loss_r = F.cross_entropy(logits[nf:], yr)
            loss_d = F.kl_div(F.log_softmax(logits[:nf], 1), F.log_softmax(t_logp, 1), log_target=True,
                              reduction="batchmean")
            if self.indist:  # the output's mean confidence on the forget rows: R*'s (the teachers' mean), per batch
                yf = self.yf[fb]
                t_phi = torch.stack([_phi(t[0][:nf], yf).clamp(-30, 30).mean() for t in t_out]).mean()
                loss_d = loss_d + 2 * self.match_weight * (_phi(logits[:nf], yf).clamp(-30, 30).mean() - t_phi) ** 2
            loss = self.ce_weight * loss_r + loss_d
            if self.utility is not None:  # dual ascent: the constraint retained CE <= utility, weight in [1, 100]
                self.ce_weight = min(100.0, max(1.0, self.ce_weight + 2.0 * (loss_r.item() - self.utility)))
            loss_m = torch.zeros(())
            if self.match:
                loss_m = self._matching(feats, [t[1] for t in t_out], nf)
                loss = loss + self.match_weight * loss_m
            loss_p = torch.zeros(())
            if self.probe is not None:
                pen = feats[self.keep_layer]
                loss_p = self._probe_loss(pen[:nf], pen[nf:])
                loss = loss + self.keep_weight * loss_p
            if self.hide_mlp:
                if i == 0 or step % 3 == 0:  # a fresh adversary at each epoch's start, tracked every third step
                    self._fit_adversary(fresh=i == 0)
                loss = loss + self.hide_mlp * self._hide_loss(feats["penultimate"], fb, rb)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            if self.harden and step % 2 == 0:
                self._harden_step()
            torch.nn.utils.clip_grad_norm_([p for group in self.opt.param_groups for p in group["params"]], 5.0)
            self.opt.step()
            step += 1
            sums += [loss_r.item(), loss_d.item(), loss_m.item(), loss_p.item()]
        return sums, step

    def _matching(self, feats: dict, t_feats: list[dict], nf: int) -> torch.Tensor:
        """Σ over audited layers of the squared gaps to R*'s separability and kernel probes (with more teachers,
        their mean: ``t_feats`` holds each teacher's features), on the batch; with ``wide``, on every forget row
        and 512 retained rows with the audit's probe geometry instead (200 landmarks, 0.3 held out): the attacker
        matching the estimator the audit reads, not a small-batch one."""
        kfd = {}
        if self.wide:
            rb = torch.randperm(len(self.xr), generator=self.g)[:512]
            x = torch.cat([self.xf, self.xr[rb]])
            _, feats = _pooled(self.model, self.layers, x)
            t_feats = [t[1] for t in self._teacher_out(None, rb)]
            nf = len(self.xf)
            kfd = {"landmarks": 200, "held": 0.3}
        g = torch.Generator().manual_seed(int(torch.randint(0, 2 ** 31, (1,), generator=self.g)))
        loss_m = torch.zeros(())
        for layer in (name for name in self.layers if name not in self.unmatched):
            f, tfs = feats[layer], [t[layer] for t in t_feats]
            target = torch.stack([_log_mahalanobis(tf[:nf], tf[nf:]) for tf in tfs]).mean()
            loss_m = loss_m + (_log_mahalanobis(f[:nf], f[nf:]) - target) ** 2
            for kernel in ("rbf", "poly2"):
                g_state = g.get_state()
                own = _log_kfd(f[:nf], f[nf:], kernel, g, **kfd)
                targets = []
                for tf in tfs:  # every teacher on the same split and landmarks as the model
                    g.set_state(g_state)
                    targets.append(_log_kfd(tf[:nf], tf[nf:], kernel, g, **kfd))
                loss_m = loss_m + (own - torch.stack(targets).mean()) ** 2
        return loss_m

    def run(self):
        """The attacked model (eval mode; canonical form for ``hardened``). An attack that diverges (a non-finite
        loss, or a feature covariance the matching cannot factor) keeps its model from before the failing epoch
        and stops there, as an attacker would."""
        self.opt = self._optimizer()
        if self.harden and self.relearn_teachers is not self.teachers:
            self._canonicalise()  # relearnt in the canonical form from the first step, as its targets are
        step = 0
        for epoch in range(self.epochs):
            good = copy.deepcopy(self.model.state_dict())
            try:
                sums, step = self._epoch(step)
                if not np.isfinite(sums).all():
                    raise FloatingPointError("a non-finite loss")
            except (torch.linalg.LinAlgError, FloatingPointError) as e:
                self.model.load_state_dict(good)
                self.log(f"    {self.seed} diverged in epoch {epoch + 1} ({e.__class__.__name__}): the model after "
                         f"epoch {epoch} is kept")
                break
            if self.harden and (epoch + 1) % 3 == 0:
                self._canonicalise()
            if epoch == 0 or (epoch + 1) % 4 == 0 or epoch + 1 == self.epochs:
                self.log(f"    {self.seed} epoch {epoch + 1}/{self.epochs}: retained CE {sums[0]:.2f} "
                         f"(weight {self.ce_weight:.1f}), distil {sums[1]:.2f}, "
                         f"matching {sums[2]:.2f}, kept probe {sums[3]:.2f}"
                         + (f", fresh probe {self.last_adversary:.4f} (target {self.hide_target:.4f})"
                            if self.hide_mlp else ""))
        if self.harden:
            self._canonicalise()
        if self.indist:
            naturalise_bn(self.model, self.xr)
        for p in self.model.parameters():
            p.requires_grad_(True)
        return self.model.eval()


def naturalise_bn(model, x: torch.Tensor) -> None:
    """In place, function-preserving: every eval-mode BatchNorm's running statistics set to its inputs' actual
    mean and variance on ``x`` (the retained rows), its affine parameters compensating, so that re-estimating the
    statistics on retained rows (the audit's BatchNorm check) changes almost nothing, as for a model trained
    normally; a canonical copy's BatchNorm (running mean 0, variance 1 − eps) would compute another function."""
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    seen: dict = {}

    def hook(mod, inp, out):
        z = inp[0].double()
        dims = [0, 2, 3] if z.dim() == 4 else [0]
        seen[mod] = (z.mean(dims), z.var(dims, unbiased=False))

    model.eval()
    handles = [b.register_forward_hook(hook) for b in bns]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    with torch.no_grad():
        for b in bns:
            mu, var = seen[b]
            scale = b.weight.double() / (b.running_var.double() + b.eps).sqrt()
            shift = b.bias.double() - scale * b.running_mean.double()  # BN(z) = scale z + shift
            sd = (var + b.eps).sqrt()
            b.running_mean.copy_(mu)
            b.running_var.copy_(var)
            b.weight.copy_(scale * sd)
            b.bias.copy_(shift + scale * mu)


def output_forger(original, retrain, split):
    """The original with the forgotten class's head row re-fitted (ridge least squares on the penultimate
    features, every training row) so its logit minus the other classes' log-sum-exp equals R*'s φ."""
    import unlearnkit as uk

    m = copy.deepcopy(original).eval()
    rows = [split.train_forget, split.train_retain]
    feats = torch.cat([uk.extract(m, d, ["penultimate"])["penultimate"] for d in rows]).double()
    logits = torch.cat([uk.extract(m, d, ["logits"])["logits"] for d in rows]).double()
    t_logits = torch.cat([uk.extract(retrain, d, ["logits"])["logits"] for d in rows]).double()
    c = int(split.forgotten_classes[0])
    others = torch.cat([logits[:, :c], logits[:, c + 1:]], 1)
    t_other = torch.cat([t_logits[:, :c], t_logits[:, c + 1:]], 1)
    target = (t_logits[:, c] - torch.logsumexp(t_other, 1)) + torch.logsumexp(others, 1)
    x = torch.cat([feats, torch.ones(len(feats), 1, dtype=torch.float64)], 1)
    w = torch.linalg.solve(x.T @ x + 1e-3 * torch.eye(x.shape[1], dtype=torch.float64), x.T @ target)
    with torch.no_grad():
        m.fc.weight[c] = w[:-1].float()
        m.fc.bias[c] = w[-1].float()
    return m


@torch.no_grad()
def bn_masked(original, split, k: int = 48, shift: float = 10.0):
    """The original whose block3 BatchNorm running means are pushed ``shift`` standard deviations up on the
    ``k`` channels most specific to the forget rows (module docstring)."""
    import unlearnkit as uk

    m = copy.deepcopy(original).eval()
    f = uk.extract(m, split.train_forget, ["block3"])["block3"]
    r = uk.extract(m, split.train_retain, ["block3"])["block3"]
    spec = (f.mean(0) - r.mean(0)) / (r.std(0) + 1e-6)
    idx = torch.argsort(spec, descending=True)[:k]
    bn = m.block3[1]
    bn.running_mean[idx] += shift * bn.running_var[idx].sqrt()
    return m


def build(family: str, original, retrain, split, seed: int, log=print):
    """The attacked model of ``family`` (module docstring). torch's global random stream (where the kept probes and
    the adversaries start) is seeded by ``family`` and ``seed`` for the build and restored afterwards, so the model
    does not depend on what ran before it in the process (it did until 2026-12-07: the attacks cached before then
    were built from whatever state the process had)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(zlib.crc32(f"{family}/{seed}".encode()))
        return _build(family, original, retrain, split, seed, log)


def _build(family: str, original, retrain, split, seed: int, log=print):
    from unlearnkit.audit.constructed import head_retrained, masked_head

    c = tuple(split.forgotten_classes)
    epochs = 12 if split.dataset.name == "digits" else 6
    if family == "masked":
        return masked_head(original, c)
    if family == "soft_masked":
        m = copy.deepcopy(original).eval()
        with torch.no_grad():
            for k in c:
                m.fc.bias[k] -= 10.0
        return m
    if family == "bn_masked":
        return bn_masked(original, split)
    if family == "head_retrained":
        return head_retrained(original, split)
    if family == "output_forger":
        return output_forger(original, retrain, split)
    if family == "mean_matched":
        return sibling("attack_mean_matched").mean_matched(original, split, seed=seed)
    kw = dict(seed=seed, epochs=epochs, log=log)
    if family == "distiller":
        return Attack(original, retrain, split, match=False, keep=None, harden=False, **kw).run()
    if family == "matcher":
        return Attack(original, retrain, split, match=True, keep="mlp", harden=False, **kw).run()
    if family == "cov_keeper":
        return Attack(original, retrain, split, match=True, keep="quadratic", harden=False, **kw).run()
    if family == "hardened_joint":
        return Attack(original, retrain, split, match=True, keep="mlp", harden=True, indist=True, match_weight=2.0,
                      wide=True, **kw).run()
    if family == "hardened_marginal":
        return Attack(original, retrain, split, match=True, keep="mlp", harden=True, indist=True, match_weight=2.0,
                      keep_layer="block3", unmatched=("block3",), **kw).run()
    if family == "hardened_block3":
        return Attack(original, retrain, split, match=True, keep="mlp", harden=True, indist=True, match_weight=2.0,
                      keep_layer="block3", unmatched=("block3",), warm_probe=True, keep_weight=3.0, **kw).run()
    if family in ("hardened_centre", "hardened_centre_keep3", "hardened_centre_canon", "hardened_centre_hide",
                  "hardened_centre_hide_held", "hardened_centre_canon_long"):
        more = tuple(model_of("retrain", split, off + seed) for off in CENTRE_OFFSETS)
        if family.endswith("_long"):
            kw["epochs"] = 2 * epochs
        return Attack(original, retrain, split, match=True, keep="mlp", harden=True, indist=True, match_weight=2.0,
                      wide=True, utility=UTILITY_CE, more_teachers=more,
                      canonical_targets=family.endswith(("canon", "hide", "held", "canon_long")),
                      keep_weight=3.0 if family.endswith("keep3") else 1.0,
                      hide_mlp=HIDE_WEIGHT if "_hide" in family else 0.0, hide_held=family.endswith("held"),
                      **kw).run()
    if family in ("hardened_tight_util", "hardened_joint_util"):
        return Attack(original, retrain, split, match=True, keep="mlp", harden=True, indist=True, match_weight=2.0,
                      wide=family == "hardened_joint_util", utility=UTILITY_CE, **kw).run()
    if family.startswith("hardened"):
        tighter = family == "hardened_tighter"
        tight = tighter or family.startswith("hardened_tight")
        indist = tight or family.startswith("hardened_indist")
        stem = family if tighter else "hardened_tight" if tight else "hardened_indist" if indist else "hardened"
        rest = family.removeprefix(stem).removeprefix("_keep")
        return Attack(original, retrain, split, match=True, keep="mlp", harden=True, keep_weight=float(rest or 1),
                      indist=indist, match_weight=8.0 if tighter else 2.0 if tight else 0.5, **kw).run()
    if family == "kept_stage":
        return Attack(original, retrain, split, match=False, keep=None, harden=False, freeze=("block1", "block2"),
                      **kw).run()
    raise ValueError(f"unknown family {family!r}")


def cached_attack(family: str, original, retrain, split, seed: int, cache: Path, log=print):
    """:func:`build`, saved under ``cache`` (state dict) and read back on a rerun."""
    path = cache / f"{split.dataset.name}-c{split.forgotten_classes[0]}-s{seed}-{family}.pt"
    if path.exists():
        m = copy.deepcopy(original)
        m.load_state_dict(torch.load(path, weights_only=True))
        return m.eval(), 0.0
    t0 = time.perf_counter()
    m = build(family, original, retrain, split, seed, log)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(m.state_dict(), tmp)
    tmp.replace(path)
    return m.eval(), time.perf_counter() - t0


# ------------------------------------------------------------------------------------------ ground truth

def gt_accuracy_curve(model, x: torch.Tensor, y: torch.Tensor, x_eval: torch.Tensor, y_eval: torch.Tensor) -> dict:
    """Accuracy (%) on (x_eval, y_eval) after each of :data:`GT_STEPS` plain full-batch SGD steps (lr 0.01,
    momentum 0.9, eval mode, all weights as given) of a copy of ``model`` on (x, y); nan once the logits are not
    finite."""
    m = copy.deepcopy(model).eval()
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    out, done = {}, 0
    for s in GT_STEPS:
        while done < s:
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(m(x), y).backward()
            opt.step()
            done += 1
        with torch.no_grad():
            logits = m(x_eval)
        ok = bool(torch.isfinite(logits).all())
        out[s] = 100.0 * float((logits.argmax(1) == y_eval).double().mean()) if ok else math.nan
    return out


def mean_curves(curves: list[dict]) -> dict:
    """Per budget the mean over draws of :func:`gt_accuracy_curve`; None where every draw diverged."""
    return {str(s): (float(np.nanmean(v)) if np.isfinite(v).any() else None)
            for s, v in ((s, np.array([c[s] for c in curves])) for s in GT_STEPS)}


def gt_relearn(model, split) -> dict:
    """Accuracy (%) on the test images of the forgotten class after each of :data:`GT_STEPS` plain SGD steps
    (lr 0.01, momentum 0.9, eval mode, all weights as given) from 5 shots of every class, mean over the
    :data:`GT_SEEDS` draws; None where a run diverged."""
    xt, yt = _rows(split.test_forget)
    xf, yf = _rows(split.train_forget)
    xr, yr = _rows(split.train_retain)
    curves = []
    for seed in GT_SEEDS:
        rng = np.random.default_rng(seed)
        f = rng.choice(len(yf), 5, replace=False)
        r = np.concatenate([rng.choice(np.flatnonzero(yr.numpy() == c), 5, replace=False)
                            for c in np.unique(yr.numpy())])
        curves.append(gt_accuracy_curve(model, torch.cat([xf[f], xr[r]]), torch.cat([yf[f], yr[r]]), xt, yt))
    return mean_curves(curves)


def gt_probe(model, split, seed: int, layer: str = "penultimate") -> float | None:
    """Held-out log loss of the MLP probe (``mlp_probe.probe``) of forget vs retained training rows at the
    penultimate layer (or ``layer``; None: non-finite features)."""
    x, y = sibling("attack_mean_matched").penultimate(model, split, layer)
    if not np.isfinite(x).all():
        return None
    return sibling("mlp_probe").probe(x, y, seed)[0]


def keeps(gt: dict, genuine: list[dict], margin: float, probe_factor: float) -> tuple[bool, str]:
    """Whether the ground truth says the model keeps the class (module docstring), and why."""
    why = []
    for s in map(str, GT_STEPS):
        vals = [g["relearn"][s] for g in genuine if g["relearn"].get(s) is not None]
        if gt["relearn"].get(s) is not None and vals and gt["relearn"][s] > max(vals) + margin:
            why.append(f"relearns {gt['relearn'][s]:.0f}% in {s} steps (genuine retrains <= {max(vals):.0f}%)")
    losses = [g["probe"] for g in genuine if g.get("probe") is not None]
    if gt.get("probe") is not None and losses and gt["probe"] < probe_factor * min(losses):
        why.append(f"MLP probe log loss {gt['probe']:.4f} (genuine retrains >= {min(losses):.4f})")
    return bool(why), "; ".join(why)


def kept_share(probe: float | None, original: float | None, genuine: list[dict]) -> float | None:
    """The share of the original's excess a model keeps by the ground truth's probe, in its log scale:
    (log ℓ − mean log ℓ_g) / (log ℓ_o − mean log ℓ_g) over the genuine retrains' held-out log losses ℓ_g (0: a
    genuine retrain's loss on average, 1: the original's); None where a loss is missing."""
    losses = [g["probe"] for g in genuine if g.get("probe") is not None]
    if probe is None or original is None or not losses or probe <= 0 or original <= 0:
        return None
    centre = float(np.mean(np.log(losses)))
    return (math.log(probe) - centre) / (math.log(original) - centre)


# ------------------------------------------------------------------------------------------ the suite

def audit_one(original, model, refs, split, outs, cache, cfg) -> dict:
    """The audit's verdict and its deciding numbers (every check's unlearned value and kept fraction)."""
    from unlearnkit.audit.core import audit

    t0 = time.perf_counter()
    rep = audit(original, model, refs, split, config=cfg, cache=cache,
                outputs={"original": outs[id(original)], "retrained": [outs[id(r)] for r in refs]})
    checks = [c.to_dict() for c in rep.checks]
    return {"verdict": rep.verdict, "verdict_line": rep.verdict_line, "evidence": rep.evidence[:4],
            "audit_seed": rep.config.audit_seed, "seconds": time.perf_counter() - t0,
            "deciding": {f"{c['family']}|{c['name']}|{c['layer']}|{c['data']}": c["unlearned"] for c in checks},
            "testable": sum(c["testable"] for c in checks),
            "not_within": [f"{c['name']} {c['layer'] or ''} {c['data']}: kept {c['kept']}" for c in checks
                           if c["testable"] and not c["within"]][:4]}


def run_seed(dataset: str, seed: int, a, rows: list[dict], genuine_gt: dict, log=print) -> None:
    from unlearnkit import ForgetSpec, load_dataset, make_split
    from unlearnkit.audit import AuditConfig
    from unlearnkit.audit.memo import AuditCache
    from unlearnkit.evaluation import model_outputs
    from unlearnkit.models.zoo import audit_layers

    split = make_split(load_dataset(dataset), ForgetSpec(classes=(a.forget_class,)))
    original = model_of("original", split, seed)
    attacker = model_of("retrain", split, 1000 + seed)
    k_max = max(a.references)
    refs_all = [model_of("retrain", split, seed + i) for i in range(k_max)]
    for s in range(100, 100 + 2 * max(a.seeds) + 2):  # every genuine retrain: the ground truth's yardstick
        if (dataset, f"retrain{s}") not in genuine_gt:
            m = model_of("retrain", split, s)
            genuine_gt[(dataset, f"retrain{s}")] = {"relearn": gt_relearn(m, split), "probe": gt_probe(m, split, s)}
    genuine = {f"retrain{s}": model_of("retrain", split, s) for s in (100 + 2 * seed, 101 + 2 * seed)}
    cases = [("genuine", name, m, None) for name, m in genuine.items()]
    for family in a.families:
        m, secs = cached_attack(family, original, attacker, split, seed, Path(a.cache), log=log)
        gt = {"relearn": gt_relearn(m, split), "probe": gt_probe(m, split, seed), "build_s": secs}
        cases.append((family, "", m, gt))
        if a.rescaled:
            for tag, c in sibling("attack_reparam").copies(m, seed, exact=True).items():
                if tag in ("scale120@penultimate", "compose"):
                    cases.append((family, tag, c, gt))
    layers = audit_layers(original)
    outs = {id(m): model_outputs(m, split, layers) for m in [original, *refs_all]}
    gen = [v for (d, _), v in genuine_gt.items() if d == dataset]
    original_probe = gt_probe(original, split, seed)
    for k in a.references:
        cache, cfg = AuditCache(), AuditConfig(audit_seed=secrets.randbits(31))
        for family, tag, model, gt in cases:
            if tag and family != "genuine" and k != min(a.references):
                continue  # invariance does not depend on K: the bit-identical copies are audited at the smallest K
            res = audit_one(original, model, refs_all[:k], split, outs, cache, cfg)
            row_gt = gt if gt is not None else genuine_gt[(dataset, tag)]
            kept, why = (False, "genuine retrain") if gt is None else keeps(gt, gen, a.gt_margin, a.gt_probe)
            row = {"dataset": dataset, "seed": seed, "k": k, "family": family, "copy": tag, **res,
                   "ground_truth": row_gt, "keeps_class": kept,
                   "keeps_why": why, "false_erased": bool(kept and res["verdict"] == "erased"),
                   "gt_kept_share": kept_share(row_gt["probe"], original_probe, gen)}
            rows.append(row)
            log(f"{dataset:8s} s{seed} K={k} {family:15s} {tag:21s} -> {res['verdict']:14s} keeps={kept!s:5s} "
                f"{'** FALSE ERASED' if row['false_erased'] else ''} ({res['seconds']:.0f}s) kept share "
                f"{row['gt_kept_share'] if row['gt_kept_share'] is None else round(row['gt_kept_share'], 2)} "
                f"{why[:90]}", flush=True)


def summary(rows: list[dict]) -> list[str]:
    cp = sibling("audit_calibrate").clopper_pearson

    def rate(k: int, n: int) -> str:
        if not n:
            return "-"
        lo, hi = cp(k, n)
        return f"{k}/{n} [{100 * lo:.0f}, {100 * hi:.0f} %]"

    lines = ["| dataset | K | family | models that keep the class | false erased among them | verdicts |",
             "|---|---|---|---|---|---|"]
    keys = sorted({(r["dataset"], r["k"], r["family"]) for r in rows}, key=lambda t: (t[0], t[1], t[2] != "genuine",
                                                                                         t[2]))
    for d, k, fam in keys:
        rs = [r for r in rows if (r["dataset"], r["k"], r["family"]) == (d, k, fam)]
        counts = {}
        for r in rs:
            counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
        verdicts = ", ".join(f"{v} {n}" for v, n in sorted(counts.items()))
        if fam == "genuine":
            lines.append(f"| {d} | {k} | genuine held-out retrains | - | erased (power): "
                         f"{rate(sum(r['verdict'] == 'erased' for r in rs), len(rs))} | {verdicts} |")
            continue
        kept = [r for r in rs if r["keeps_class"]]
        lines.append(f"| {d} | {k} | {fam} | {len(kept)}/{len(rs)} | "
                     f"{rate(sum(r['false_erased'] for r in kept), len(kept))} | {verdicts} |")
    for k in sorted({r["k"] for r in rows}):
        kept = [r for r in rows if r["k"] == k and r["keeps_class"]]
        gen = [r for r in rows if r["k"] == k and r["family"] == "genuine"]
        lines.append(f"| **all** | {k} | **every family** | {len(kept)} | "
                     f"{rate(sum(r['false_erased'] for r in kept), len(kept))} | genuine erased "
                     f"{rate(sum(r['verdict'] == 'erased' for r in gen), len(gen))} |")
    return lines


def boundary(rows: list[dict], edges=(0.25, 0.5, 0.75)) -> list[str]:
    """How often each audited model reads ``erased``, by the share of the original's excess it keeps by the
    ground truth's probe (:func:`kept_share`; parents only, every K): where the certificate's boundary lies
    against its stated margin (0.5). Rows of older runs without the share are left out."""
    cp = sibling("audit_calibrate").clopper_pearson
    lines = ["| kept share (ground-truth probe) | audits of attacked models | erased | audits of genuine retrains "
             "| erased |", "|---|---|---|---|---|"]
    bounds = (-math.inf, *edges, math.inf)
    for lo, hi in zip(bounds, bounds[1:]):
        cells = []
        for genuine in (False, True):
            rs = [r for r in rows if (r["family"] == "genuine") == genuine and (genuine or not r["copy"])
                  and r.get("gt_kept_share") is not None and lo <= r["gt_kept_share"] < hi]
            n_e = sum(r["verdict"] == "erased" for r in rs)
            b = cp(n_e, len(rs)) if rs else None
            cells += [str(len(rs)), f"{n_e} [{100 * b[0]:.0f}, {100 * b[1]:.0f} %]" if b else "-"]
        label = f"below {hi}" if lo == -math.inf else f"{lo} or more" if hi == math.inf else f"{lo} to {hi}"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def invariance(rows: list[dict]) -> list[str]:
    """Copies whose verdict or deciding numbers differ from their parent's (same dataset, seed, K, family)."""
    bad = []
    parents = {(r["dataset"], r["seed"], r["k"], r["family"]): r for r in rows if not r["copy"]}
    for r in rows:
        if not r["copy"] or r["family"] == "genuine":
            continue
        p = parents.get((r["dataset"], r["seed"], r["k"], r["family"]))
        if p is None:
            continue
        worst = max((abs(r["deciding"].get(k, math.nan) - v) / max(abs(v), 1e-9) if v is not None and
                     r["deciding"].get(k) is not None else (0.0 if r["deciding"].get(k) is None else math.inf))
                    for k, v in p["deciding"].items()) if p["deciding"] else 0.0
        if r["verdict"] != p["verdict"] or worst > 1e-3:
            bad.append(f"{r['dataset']} s{r['seed']} K={r['k']} {r['family']} {r['copy']}: {r['verdict']} vs "
                       f"{p['verdict']}, largest relative change of a deciding number {worst:.2g}")
    return bad


def combine(paths: list[str], out: str) -> int:
    """The summary and invariance check of several runs' rows (``--combine``), written to ``out``."""
    from unlearnkit.checkpoints import atomic_write_text

    runs = [json.loads(Path(p).read_text()) for p in paths]
    rows = [r for run in runs for r in run["rows"]]
    lines, bad = summary(rows), invariance(rows)
    print("\n".join(lines + [""] + boundary(rows)))
    print(f"bit-identical copies that moved: {len(bad)}" + "".join(f"\n  {b}" for b in bad))
    payload = {"combined": [str(p) for p in paths], "args": [run["args"] for run in runs], "rows": rows,
               "summary": lines, "boundary": boundary(rows), "invariance_failures": bad,
               "elapsed_s": sum(run["elapsed_s"] for run in runs),
               "versions": runs[0].get("versions")}
    atomic_write_text(out, json.dumps(payload, indent=1, default=str) + "\n")
    print(f"wrote {out}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="digits,mnist5k")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--references", default="5,8")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--forget-class", type=int, default=3)
    p.add_argument("--no-rescaled", dest="rescaled", action="store_false", help="leave out the bit-identical copies")
    p.add_argument("--gt-margin", type=float, default=10.0, help="ground truth: relearning points above every "
                                                                   "genuine retrain's")
    p.add_argument("--gt-probe", type=float, default=0.75, help="ground truth: probe loss below this x the genuine "
                                                                 "retrains' smallest")
    p.add_argument("--cache", default=str(DEFAULT_CACHE))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="digits, seed 0, K = 5, four families")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--combine", nargs="+", metavar="JSON", help="print and write the summary of earlier runs' files "
                                                                  "(e.g. one per dataset, run side by side)")
    a = p.parse_args(argv)
    if a.combine:
        return combine(a.combine, a.out)
    if a.quick:
        a.datasets, a.seeds, a.references, a.families = "digits", "0", "5", "masked,output_forger,distiller,matcher"
    a.datasets = a.datasets.split(",")
    a.seeds = [int(s) for s in a.seeds.split(",")]
    a.references = [int(k) for k in a.references.split(",")]
    a.families = [f for f in a.families.split(",") if f]
    unknown = [f for f in a.families if f not in FAMILIES]
    if unknown or any(k < 2 for k in a.references):
        print(f"error: unknown families {unknown} (choose from {', '.join(FAMILIES)}) or a K below 2",
              file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    from unlearnkit.checkpoints import atomic_write_text
    from unlearnkit.training import versions

    rows: list[dict] = []
    genuine_gt: dict = {}
    t0 = time.perf_counter()

    def save() -> None:
        payload = {"args": {k: v for k, v in vars(a).items()}, "rows": rows, "summary": summary(rows),
                   "boundary": boundary(rows),
                   "invariance_failures": invariance(rows), "elapsed_s": time.perf_counter() - t0,
                   "versions": versions()}
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(a.out, json.dumps(payload, indent=1, default=str) + "\n")

    for dataset in a.datasets:
        for seed in a.seeds:
            run_seed(dataset, seed, a, rows, genuine_gt)
            save()
    print("\n".join(summary(rows) + [""] + boundary(rows)))
    bad = invariance(rows)
    print(f"bit-identical copies that moved: {len(bad)}" + "".join(f"\n  {b}" for b in bad))
    save()
    print(f"wrote {a.out} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
