"""AuditConfig: every threshold of the representation audit, documented with what it was set from.

The defaults were calibrated on measurements, not chosen to make tests pass; ``CALIBRATION``
below lists the numbers they come from (reproduce them with ``python benchmarks/audit_calibrate.py``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from ..errors import UserError

AUDIT_DATA = ("auto", "test", "train")
PROBE_SOLVERS = ("auto", "batched", "sklearn", "scipy")
CI_METHODS = ("corrected_t", "t", "percentile")

#: How the audit's false-flag budget (1 − ``confidence``: the most often a genuine retrain may be flagged) is
#: split among the checks that decide with K >= 2 references (Bonferroni across them): the layers' family
#: (:mod:`unlearnkit.audit.tolerance`), the output membership test (:mod:`unlearnkit.metrics.output_test`) and
#: the four resurfacing checks (BatchNorm recalibration, head re-fit, head relearning, relearning on canonical
#: copies: margins from the references' spread, :func:`unlearnkit.audit.resurface.relearn_margin`). With one
#: reference the first two keep their measured constant margins (outside this budget) and the last two only
#: withhold ``erased``.
BUDGET = {"layers": 0.375, "output": 0.125, "bn_recalibration": 0.125, "head_refit": 0.125, "head_relearn": 0.125,
          "relearn": 0.125}

CALIBRATION = """\
Measured with ``python benchmarks/audit_calibrate.py --dataset digits --classes 3,6,8 --holdout 1,5,7
--seeds 6`` (small_cnn, default recipe, data_seed 0; benchmarks/results/audit_calibration_digits.json;
1,226 s on 2 busy cores). Per forgotten class, six retrains (seeds 0-5) and the original; on the
training split's forget vs retained rows (digits: 131 / 1,164), the separability ratio U_i / U_j (the
Gaussian-unbiased Mahalanobis distance, metrics/lda.py) of every ordered pair of distinct retrains,
with its 95 % interval, and the original's ratio over each retrain (the original's representation is
the one an output-masked original keeps).

class layer        retrain pairs: ratios (interval ends)   original over retrain: ratios (lowest end)
calibration classes
3     block1       0.55-1.83 (0.46-2.18)                   1.64-2.99 (1.42)
3     block2       0.79-1.26 (0.72-1.39)                   2.24-2.82 (2.02)
3     block3       0.90-1.11 (0.82-1.22)                   3.58-3.96 (3.25)
3     penultimate  0.78-1.28 (0.71-1.41)                   5.70-7.29 (5.18)
6     block1       0.59-1.68 (0.51-1.96)                   0.69-1.17 (0.60)
6     penultimate  0.73-1.36 (0.67-1.50)                   3.60-4.92 (3.37)
8     block1       0.74-1.36 (0.65-1.54)                   1.27-1.72 (1.12)
8     penultimate  0.65-1.54 (0.58-1.74)                   6.06-9.36 (5.38)
held-out classes
1     penultimate  0.56-1.79 (0.49-2.04)                   10.61-18.98 (9.42)
5     block2       0.54-1.85 (0.48-2.06)                   2.06-3.81 (1.88)
7     penultimate  0.62-1.62 (0.55-1.80)                   3.63-5.89 (3.25)

The one-reference tolerance is the smallest t with every calibration pair's whole interval inside
[1/t, t] at every layer: 2.18 (class 3, block1), used as 2.2. On the held-out classes 1, 5, 7 (90
ordered pairs of 18 retrains; pairs share models, so they are not 90 independent trials) no retrain
pair falls outside [1/2.2, 2.2] at any layer (0 of 90: none would fail to be certified or be flagged),
and the original is nowhere inside it at every layer (0 of 18). Where the original itself is inside
the tolerance at a layer (class 6 block1: 0.69-1.17) that layer is untestable (the per-layer control).

mnist5k, measured with ``python benchmarks/audit_calibrate.py --dataset mnist5k --classes 3,6,8 --holdout 5
--seeds 6 --device cuda`` (an H200 lent for the session, torch 2.11; 117 s;
benchmarks/results/audit_calibration_mnist5k.json; 360 / 3,240 forget / retained rows):

class layer        retrain pairs: ratios (interval ends)   original over retrain: ratios (lowest end)
3     block1       0.64-1.56 (0.58-1.71)                   0.79-1.23 (0.72)
3     penultimate  0.57-1.76 (0.54-1.85)                   2.38-4.19 (2.27)
6     block1       0.61-1.63 (0.54-1.86)                   0.90-1.47 (0.81)
6     penultimate  0.72-1.39 (0.68-1.47)                   2.61-3.62 (2.47)
8     penultimate  0.72-1.39 (0.69-1.45)                   2.18-3.05 (2.10)
held-out class
5     penultimate  0.85-1.17 (0.81-1.24)                   3.26-3.82 (3.09)

Its own constant is 1.86 (class 6 block1), below digits' 2.18: the 2.2 kept covers both datasets. On
held-out class 5 (30 ordered pairs of 6 retrains) no pair falls outside [1/2.2, 2.2] at any layer, and
the original is inside it at every layer in 0 of 6 audits. With one reference mnist5k has little power:
the original's penultimate ratio over one retrain is 2.18-4.19, so the positive control can fail there
at 2.2 (the layer is then untestable), and at block1 the original is inside the tolerance (untestable).
Other architectures were not calibrated: with one reference they are "uncalibrated" (pass 5 references).

Head re-fit and BatchNorm recalibration (constant margins, measured with the release before issue 28;
not re-derived from references): head re-fit from one shot of class 3 gave the class back at 95.7 %
(digits) / 63.1 % (mnist5k) from the masked original's body, at 20.2-30.8 % / 20.3-32.6 % from retrained
bodies: the 35-point margin lies between the largest retrain excess (+3.9) and the smallest body-kept
excess (+34.4). BatchNorm recalibration: retrain seeds recover 0.0 %; a gradient-ascent model (BatchNorm
in train mode; forget accuracy 7.6 %) returned to 95.4 %. Head relearning (10 SGD steps, lr 0.01, whitened
coordinates): retrained heads of class 3 at 0.0 %, of digits class 6 at 14.3 / 41.3 / 25.4 / 63.5 %: too
wide a spread for a fixed margin, so it decides only with K >= 2 references (a margin from their spread).
"""


@dataclass(frozen=True)
class AuditConfig:
    """Settings of :func:`unlearnkit.audit.audit`; every threshold, and what it was set from.

    The numbers quoted are in ``CALIBRATION`` (module attribute): small_cnn on digits and mnist5k
    with class 3 forgotten, a masked-head original (must be caught) and retrained models of other
    seeds (must pass).

    **Probe (Mirage, reference-specs §2.5).** ``n_splits`` stratified 70/30 resplits (``test_size``)
    with seeds ``probe_seed`` + i (split 0 = Mirage's seed 42), StandardScaler +
    LogisticRegression(C=``probe_C``, ``probe_max_iter``); ΔLPR's interval is the paired
    ``ci_method`` interval at ``confidence`` (Nadeau-Bengio corrected t by default: resplits share
    data, a plain t-interval is too narrow). ``probe_solver``: ``"sklearn"`` fits each probe with
    ``LogisticRegression(lbfgs)`` (Mirage's code path); ``"scipy"`` makes the very scipy L-BFGS-B call
    ``LogisticRegression`` makes (same objective, zero start, same options, ``probe_tol`` = sklearn's
    1e-4) without scikit-learn's per-call checks: the same iterates up to float rounding (on the
    audit features of mnist5k, small_cnn, 480 fits: held-out decision values within 1.1e-8 relative,
    none of 331,200 held-out predictions changed) in 3.0 s instead of 4.8 s (one thread);
    ``"batched"`` fits the J resplits of a model and layer together on the audit's device
    (``metrics.logistic``: the same objective and stopping rule, max |gradient| <= ``probe_tol``; the
    optimum is unique, the two agree up to that tolerance: mean LPR within 0.1 point, a held-out
    sample may flip); ``"auto"``: batched on a GPU, scipy on the CPU (where batched was the slowest of
    the three inside the audit, which fits 5 to 10 resplits at a time). ``n_jobs`` parallel probe
    workers (None: the CPU count, at most 4): forked processes for the CPU probe fits where a process
    can be forked safely (Linux without a GPU; :func:`unlearnkit.audit.probing.probe_processes`;
    ``probe_processes=False`` keeps them on threads, e.g. inside an application whose own threads
    must not be forked), threads for the rest; the numbers do not depend on them.

    **Adaptive resplitting** (the reported ΔAUROC and ΔLPR; :func:`unlearnkit.audit.layers.measure_data`).
    ``n_splits`` is the most resplits a layer gets; it may stop earlier, at the looks ``resplit_looks``
    (5, 10, then ``n_splits``; looks at or above ``n_splits`` are dropped, so ``n_splits`` <= 5 or
    ``resplit_looks=()`` is the fixed design; ``n_splits`` was 20 until issue 28's cost budget: under the
    Nadeau-Bengio correction the variance factor 1/J + n_test/n_train is 0.53 at 10 resplits and 0.48 at
    20, so a statistic that runs to the maximum gets an interval about 7 % wider for half the probe fits,
    docs/performance.md). At each of these L looks, every interval of a statistic
    (the unlearned model's and the original's, each paired against the references over the same
    resplits: every model of a layer gets the same resplits, so the pairing holds) is formed at
    confidence 1 − (1 − ``confidence``) / L, and the statistic stops at the first look where both are
    clear of its tolerance on either side (wholly inside ±tolerance, or wholly beyond it): ``auroc_margin``
    (widened as below with K >= 2 references) for ΔAUROC, ``lpr_margin`` = 2 points for ΔLPR (the
    previous release's deep-layer ΔLPR tolerance: the largest retrain-vs-retrain |ΔLPR| it measured at
    a deep layer was 1.9). Why the reported interval keeps ``confidence`` (95 %) coverage: by the union
    (Bonferroni) bound, the chance that ANY of the L intervals a statistic could stop at misses its
    true value is at most L x (1 − ``confidence``) / L = 1 − ``confidence``, so the interval of the look
    where it actually stopped (whichever, however chosen from the data) misses with at most that
    probability; each look's interval is the corrected-t interval at its own level, as valid as the
    fixed design's. The separability ratio, which the verdict reads, is not resampled this way: its
    interval is analytic (:func:`unlearnkit.metrics.lda.ratio_interval`).

    **CKA** (reported, not read by the verdict). ``center=True``: Kornblith's centered linear CKA
    on *standardised* units (each unit mean 0, variance 1), so rescaling or permuting units does not
    move it (plain CKA fell 1.000 -> 0.808 for a rescaled copy of the same function, digits
    penultimate; 0.44 in the issue's review); it is not
    invariant to mixing units. ``center=False`` reproduces Mirage's uncentered code on raw features. One subsample
    of <= ``cka_max_samples`` rows (seed ``cka_seed``) for every pair.

    **Audit data.** Both the test set and the training split's forget-vs-retain data are probed
    (random/indices forgetting: Mirage's 1:1 sample-level draw of <= ``sample_level_max_per_side``
    a side; either set capped at ``max_probe_samples`` rows by a stratified draw). With
    ``audit_data="auto"`` the verdict rests on the test set when it holds >= ``min_test_forget``
    (200) forgotten examples, otherwise on the training split. 200 because the deep-layer ΔLPR
    interval was ±6-7 points with 37 test forget samples (digits), ±2.5-4 with 100 (mnist5k test)
    and ±1.5 with 360 (mnist5k train): below ~200 it is wider than the 2-point tolerance, and the
    training split (the data the deletion request is about) is the better evidence.
    ``min_forget`` (10): below it nothing is certified (a 70/30 split leaves <= 3 held-out forget
    rows; balanced accuracy then moves in steps of >= 16 points).

    **The verdict's statistic (representation).** Per layer, the separability ratio U_unlearned / U_retrain,
    where U is the Gaussian-unbiased Mahalanobis distance Δ² = Δμᵀ Σ_w⁻¹ Δμ of forget vs retained features
    (:func:`unlearnkit.metrics.lda.unbiased_separability`), with an interval from its noncentral-F variance and the
    models' jackknife correlations (:func:`unlearnkit.metrics.lda.ratio_interval`; coverage measured by
    ``benchmarks/audit_coverage.py``). It is invariant to any function-preserving reparametrisation of the
    network (per-unit rescaling by any factor, permutation, invertible mixing of units that the next linear
    layer compensates); groups separated without overlap are reported as such ("separated"), never as a
    large finite number, and a layer where the references' own U is not clearly positive, or where there
    are too few rows for the dimension, is "cannot decide". Two-sided: a ratio below 1/tolerance is a
    deviation too.

    Reported beside it, read by no rule: ΔAUROC, the held-out AUROC (points) of the same LDA
    discriminant fitted on each resplit's 70 % and read on its 30 % (threshold-free: Mirage's balanced
    accuracy at 0 moved to 62.8 % on a 1:9 case whose AUROC was 0.88, per the issue's review; but it saturates at
    99 %+ for a
    retrain at the deep layers, and fitted in ~128 dimensions on a few hundred rows it is
    ill-conditioned enough that float32 rounding moved it by a held-out pair); Mirage's own LPR / ΔLPR
    (StandardScaler + logistic probe, balanced accuracy) and trace-form F, as the paper defines them
    (the trace form moved 6.47x -> 9.34x, and 5.98x -> 0.78x in the issue's review, under per-channel
    rescalings that left every prediction unchanged).

    **Tolerance** (:mod:`unlearnkit.audit.tolerance`). With one retrained reference,
    ``separability_margin`` = 2.2x at every layer, calibrated on small_cnn on digits and mnist5k
    (``CALIBRATION``: pairs of retrained seeds reach at most 1.83x (digits) / 1.76x (mnist5k), their
    interval ends 2.18x / 1.86x; the original over one retrain 3.6-9.4x / 2.2-4.2x at the penultimate
    layer of the calibration classes); on any other architecture one reference cannot certify
    ``erased`` (rule ``uncalibrated``). With K >= 2 references each layer's tolerance is derived from
    their spread: max(``separability_floor`` (1.5x), exp(t_{K-1, 1-a} s sqrt(1 + 1/K))), s the
    standard deviation of log U over the references, a = (1 − ``confidence``) / 2 / family size / 2
    (two-sided): a Gaussian prediction bound that flags a genuine retrain in at most half of
    1 − ``confidence`` of audits however the layers are correlated (head relearning and relearning on
    canonical copies, which decide with K >= 2, have a quarter each). It tightens when the references
    agree and widens when they do not. ``auroc_margin`` = 5 points is the reported ΔAUROC's reference line (widened to
    ``spread_factor`` x the references' largest deviation). Each layer's tolerance and its provenance
    go to audit.json.

    **The verdict's tests** (:mod:`unlearnkit.audit.verdict`). Every (audit data, layer) is one
    comparison, two-sided (a deviation in either direction counts). ``suppressed`` (above) or
    ``overforgotten`` (below) needs a comparison whose Holm-adjusted p-value (over the family of defined
    comparisons, both audit data) is below 1 − ``confidence``, so a genuine retrain is flagged in at most
    5 % of audits. ``erased`` is an equivalence claim (intersection-union test, no correction needed):
    on the data the verdict rests on, every *testable* layer's interval lies inside
    [1/tolerance, tolerance], where a layer is testable when its statistic is defined and the original,
    measured the same way, is clear of the tolerance there (a per-layer positive control).

    **Resurfacing.** ``bn_recalibration``: BatchNorm statistics re-estimated on ``bn_samples`` =
    1024 retained training rows (PURGE's momentum-0.1 recalibration effectively averages the last
    ~10 batches of 128); ``head_refit``: the head re-fitted with the body frozen from
    ``head_refit_shots`` = 1 example of the forgotten class (and the retained training data, at most
    ``head_refit_max_retain`` rows), averaged over ``head_refit_draws`` = 20 draws of the shot
    (:func:`unlearnkit.metrics.lda.fewshot_recovery`; invariant like the statistics above). Forget
    accuracy after BN recalibration (on at most ``resurface_max_forget`` = 1000 forget rows) more
    than ``resurface_margin`` = 20 points above what retrain recovers, or head re-fit recovery more
    than ``head_refit_margin`` = 35 points above retrain's, makes the verdict ``suppressed``
    (``CALIBRATION``: one shot recovers the class at 98 % (digits) / 65 % (mnist5k) from the
    original's body, 13-40 % / 24-33 % from retrained bodies). ``head_relearn`` (``relearn_steps`` = 10
    SGD steps, lr ``head_relearn_lr`` = 0.01, on the model's own head with the body frozen, from
    ``relearn_k`` = 5 examples per class, in coordinates whitened by the retained features: invariant)
    decides with K >= 2 references, over a margin from their spread (``resurface.relearn_margin``);
    with one it is reported only (retrained heads disagree by up to 49 points out of calibration,
    digits class 6). Reported, never decided on:
    ``relearn`` (the same SGD on all raw weights, lr ``relearn_lr`` = 0.01: SGD on raw weights depends
    on the parametrisation, so a function-preserving change could move it).

    **IDI** (``idi=True``; off by default because it trains critics: 3 models x layers x
    ``idi_trials``; ``unlearnkit audit --idi`` and ``unlearnkit run --idi`` turn it on). Per layer an
    InfoNCE critic (a trainable copy of the layers after it + a projection head) on
    ``idi_max_per_side`` (1000) forget and as many retained training samples, 30 % held out, SGD lr
    ``idi_lr`` for ``idi_steps`` (150) steps of batch 128, ``idi_trials`` trials (the paper: 5; 3 here to bound the
    cost); ``idi_clip`` clips per-layer differences at 0 (AAAI'26 summary) instead of the signed sum.
    IDI is reported, it does not enter the verdict.

    ``batch_size`` is the forward-pass batch.
    """

    # --- linear probe (Mirage protocol, reference-specs §2.5) -------------------------------
    n_splits: int = 10
    confidence: float = 0.95
    test_size: float = 0.3
    probe_seed: int = 42
    probe_C: float = 1.0
    probe_max_iter: int = 1000
    probe_solver: str = "auto"
    probe_tol: float = 1e-4
    ci_method: str = "corrected_t"
    resplit_looks: tuple[int, ...] = (5, 10, 20)
    lpr_margin: float = 2.0
    # --- CKA -----------------------------------------------------------------------------------
    center: bool = True
    cka_max_samples: int = 5000
    cka_seed: int = 0
    # --- which data the probes read --------------------------------------------------------------
    audit_data: str = "auto"
    min_test_forget: int = 200
    max_probe_samples: int = 10000
    sample_level_max_per_side: int = 2500
    min_forget: int = 10
    # --- tolerances of the representation verdict -----------------------------------------------
    auroc_margin: float = 5.0
    separability_margin: float = 2.2
    separability_floor: float = 1.5
    spread_factor: float = 2.0
    # --- output-level verdicts -----------------------------------------------------------------
    collapse_margin: float = 20.0
    not_forgotten_margin: float = 10.0
    utility_budget: float = 2.0
    # --- k-NN (EC) -----------------------------------------------------------------------------
    knn_k: int = 20
    # --- resurfacing checks ----------------------------------------------------------------------
    bn_recalibration: bool = True
    bn_samples: int = 1024
    head_refit: bool = True
    head_refit_shots: int = 1
    head_refit_draws: int = 20
    head_refit_margin: float = 35.0
    head_refit_max_retain: int = 5000
    head_relearn: bool = True
    head_relearn_lr: float = 0.01
    relearn: bool = True
    relearn_k: int = 5
    relearn_steps: int = 10
    relearn_lr: float = 0.01
    resurface_margin: float = 20.0
    resurface_max_forget: int = 1000
    # --- IDI (Jeon et al., reference-specs §2.6; audit/idi.py) ---------------------------------
    idi: bool = False
    idi_trials: int = 3
    idi_steps: int = 150
    idi_lr: float = 0.01
    idi_batch_size: int = 128
    idi_max_per_side: int = 1000
    idi_clip: bool = False
    # --- execution -------------------------------------------------------------------------------
    batch_size: int = 512
    n_jobs: int | None = None
    probe_processes: bool = True

    def __post_init__(self) -> None:
        from ..validate import dataclass_fields

        dataclass_fields(self)  # types first: a string or NaN where a number belongs is one clear line
        if self.audit_data not in AUDIT_DATA:
            raise UserError(f"audit_data must be one of {', '.join(AUDIT_DATA)}, not {self.audit_data!r}")
        if self.probe_solver not in PROBE_SOLVERS:
            raise UserError(f"probe_solver must be one of {', '.join(PROBE_SOLVERS)}, not {self.probe_solver!r}")
        if not self.idi_lr > 0:
            raise UserError(f"idi_lr must be > 0, got {self.idi_lr}")
        if not self.probe_tol > 0:
            raise UserError(f"probe_tol must be > 0, got {self.probe_tol}")
        if self.ci_method not in CI_METHODS:
            raise UserError(f"ci_method must be one of {', '.join(CI_METHODS)}, not {self.ci_method!r}")
        if not 0.5 <= self.confidence < 1.0:
            raise UserError(f"confidence must be in [0.5, 1), got {self.confidence}")
        if self.n_splits < 2:
            raise UserError(f"n_splits must be at least 2 (a CI needs a spread), got {self.n_splits}")
        looks = self.resplit_looks
        if any(k < 2 for k in looks) or any(b <= a for a, b in zip(looks, looks[1:])):
            raise UserError(f"resplit_looks must be increasing numbers of resplits, each at least 2, "
                            f"got {list(looks)}")
        if not 0.0 < self.test_size < 1.0:
            raise UserError(f"test_size must be in (0, 1), got {self.test_size}")
        for name in ("separability_margin", "separability_floor"):
            if not getattr(self, name) >= 1.0:  # NaN fails too
                raise UserError(f"{name} is a ratio to retrain and must be >= 1")
        if self.n_jobs is not None and not (self.n_jobs == -1 or self.n_jobs >= 1):
            raise UserError(f"n_jobs (--jobs) must be -1 (every core) or >= 1, not {self.n_jobs}")
        if not self.head_relearn_lr > 0:
            raise UserError(f"head_relearn_lr must be > 0, got {self.head_relearn_lr}")
        for name in ("auroc_margin", "lpr_margin", "spread_factor", "collapse_margin",
                     "not_forgotten_margin", "resurface_margin", "head_refit_margin"):
            if not getattr(self, name) >= 0:  # NaN fails too
                raise UserError(f"{name} must be >= 0")
        for name in ("cka_max_samples", "max_probe_samples", "sample_level_max_per_side", "min_forget",
                     "knn_k", "bn_samples", "resurface_max_forget", "relearn_k", "relearn_steps",
                     "head_refit_shots", "head_refit_draws", "head_refit_max_retain",
                     "batch_size", "min_test_forget", "idi_trials", "idi_steps",
                     "idi_batch_size", "idi_max_per_side"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be >= 1")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]
