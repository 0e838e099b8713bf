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
MLP_PROBE = ("auto", "on", "off")  # audit/probe_test.py: when the MLP probe test runs
#: below this many references an ``erased`` verdict says it is not known to hold against a party that attacks the
#: audit (docs/audit.md, "How many references": digits, the strongest attack built, ``hardened_centre_canon``,
#: certified in 5 of 20 keepers' audits at K = 5, none of 20 at K = 8)
REFERENCES_UNDER_ATTACK = 8

#: How the audit's false-flag budget (1 − ``confidence``: the most often a genuine retrain may be flagged) is
#: split among the families of deciding statistics (:mod:`unlearnkit.audit.checks`; Holm within a family at
#: its share, Bonferroni across families).
BUDGET = {"output": 0.125, "representation": 0.25, "relearning": 0.25, "heads": 0.25, "batchnorm": 0.125}

CALIBRATION = """\
What the defaults were set from (small_cnn, class 3 forgotten, seed-0 original against retrains of seeds 0-7,
held-out retrains of seeds 100-105; the original's excess over the references' mean, in the references'
standard deviations: a statistic can certify a retrain at the margin 0.5 with K = 5 references from about 9).

statistic (training data)          digits     mnist5k
relearning lr 0.01, 5 / 10 / 20    69 / 73 / 43   11 / 115 / 117
relearning lr 0.005, 10 / 20       -          60 / 53
relearning lr 0.03 / 0.02          4.5 at 5 steps (retrains disagree); oscillates or diverges on mnist5k
separability log U, penultimate    21.6       8.6
kernel probe (RBF), penultimate    10.5       12.1
kernel probe (poly2), penultimate  12.6       10.5
MLP probe log loss, penultimate    4.7        -     (not used: its held-out loss varies 3x between retrains)
output confidence (mean φ)         24.2       49.7
output agreement (Fisher z)        10.7       17.5

Held-out retrains (seeds 100-105 digits; 5-7 mnist5k) kept -0.17 to +0.11 of the original's excess at every
statistic that could be tested there with K = 5 (all certified at the margin 0.5); the masked original and the
head-retrained original keep 1.00 at every representation statistic. The benchmark behind the margin and the
attack families it is scored on: benchmarks/attack_suite.py (docs/audit.md, "Attacks the audit is scored on").
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

    **What decides** (:mod:`unlearnkit.audit.checks`, :mod:`unlearnkit.metrics.equivalence`). Every deciding
    statistic is measured the same way on the unlearned model, the original and each of K references, from
    draws and splits chosen by the audit seed ``audit_seed`` (None: drawn fresh per audit from the operating
    system, and recorded in audit.json; give it to repeat an audit): the output's confidence and per-example
    agreement on the forget rows (for sample requests also LiRA's per-example membership); at every layer of both
    audit data the separability log U and two held-out kernel probes (``kernel_probe_splits`` splits,
    ``kernel_probe_landmarks`` landmarks); relearning of a canonical copy over the sweep ``relearn_lrs`` x
    ``relearn_budgets`` from ``relearn_draws`` draws of ``relearn_k`` shots of each forgotten class (sample
    requests: 3 draws of a random half of the forget rows, with their own labels) and ``relearn_retain_k`` of each
    retained class, read on up to ``relearn_eval_rows`` held-out forget rows per set
    (:mod:`unlearnkit.audit.relearning`); the head re-fit (``head_refit_shots`` per class, ``head_refit_draws``
    draws) and head relearning (``head_relearn_steps``, lr ``head_relearn_lr``); BatchNorm recalibration on
    ``bn_samples`` retained rows
    (:mod:`unlearnkit.audit.resurface`). A statistic **flags** the model (``suppressed`` above the references
    inside the model, ``not_forgotten`` above at the output, ``overforgotten`` below) beyond the references'
    Gaussian prediction bound, Holm-corrected within its family at the family's share of 1 − ``confidence``
    (``BUDGET``). It **certifies** when the model's *kept fraction*, (u − r̄) / (o − r̄), the share of the
    original's excess over the references it keeps, lies inside (−``kept_margin``, ``kept_margin``) with
    ``confidence`` (two one-sided t tests; Fieller's interval): a margin stated as an effect size (0.5: keeps
    less than half of what the original holds), which the references' spread widens the interval of, never
    the margin. A statistic is testable where the original is far enough from the references for a genuine
    retrain to be certified with probability >= 99 % (the positive control with power, Student t: 15.6 of their
    standard deviations at K = 5); informative where a deviation is evidence (the same with the Gaussian 2.576:
    11.2 at K = 5; flags and the told-apart tests read these). ``erased`` needs every testable statistic
    certified, on both audit data, at least one at the output and one inside the model, and none **told apart**
    (beyond the references' prediction bound, Holm within the family at its share of ``told_apart_level``,
    material or not: not erased; recovering less than the references does not count), nor told apart **jointly**
    (:mod:`unlearnkit.audit.joint`: the root mean square of the model's standardised deviations over every
    informative statistic beyond the references' own, at ``joint_level``), nor told apart by the **MLP probe test**
    (:mod:`unlearnkit.audit.probe_test`: a held-out MLP probe of the class at the penultimate layer,
    ``mlp_probe_seeds`` probe seeds from the audit seed, up to ``mlp_probe_max_retain`` retained rows, finding the
    class more easily than in the references at ``mlp_probe_level``, 0.2; ``mlp_probe`` "auto" runs it on class
    requests with 3 to 7 references, where five references and the other tests let an attack through). The first
    two levels are 0.05, the flag's
    (``told_apart_level`` None: 1 − ``confidence``, whatever the confidence): a told-apart model is only left
    open, never accused. Before the joint test (2026-12-07) ``told_apart_level``
    was 0.2, four times the flag's, because five references told models that keep a third of the original's
    excess from retrains too rarely at 0.05; over four sets of audits (digits, seeds 0-5, the ``hardened``
    families, K = 5) it let 10 of 236 such audits through and certified 70 % of genuine retrains', where both
    levels at 0.05 with the joint test let 1 through and certified 73 %, and 85 % once testability read Student t
    (``benchmarks/combined_rule.py``, docs/audit.md "The joint test"). ``CALIBRATION``
    lists the measurements behind the sweep and the margin.

    Reported beside them, read by no rule: the separability ratio U_unlearned / mean U_references with an
    interval for the audit data's sampling noise; ΔAUROC, the held-out AUROC (points) of the LDA
    discriminant (it saturates at 99 %+ for a retrain at the deep layers); Mirage's own LPR / ΔLPR and
    trace-form F, as the paper defines them (the trace form moved 6.47x -> 9.34x under per-channel
    rescalings that left every prediction unchanged); MMD² when ``mmd`` is on; relearning of the weights as
    given (``relearn_steps`` steps at ``relearn_lr``: not invariant). ``auroc_margin`` = 5 points is the
    reported ΔAUROC's reference line (widened to ``spread_factor`` x the references' largest deviation).

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
    n_splits: int = 5
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
    # --- what decides: the audit seed and the margin -------------------------------------------------
    audit_seed: int | None = None
    kept_margin: float = 0.5
    recovery_margin: float = 0.1
    told_apart_level: float | None = None  # None: the flag's level, 1 - confidence (0.05)
    joint_level: float = 0.05
    mlp_probe: str = "auto"
    mlp_probe_level: float = 0.2
    mlp_probe_seeds: int = 3
    mlp_probe_max_retain: int = 1200
    kernel_probe_splits: int = 3
    kernel_probe_landmarks: int = 200
    mmd: bool = False
    auroc_margin: float = 5.0
    spread_factor: float = 2.0
    # --- output-level verdicts -----------------------------------------------------------------
    collapse_margin: float = 20.0
    not_forgotten_margin: float = 10.0
    utility_budget: float = 2.0
    # --- k-NN (EC) -----------------------------------------------------------------------------
    knn_k: int = 20
    # --- relearning and the resurfacing checks -------------------------------------------------------
    relearn_lrs: tuple[float, ...] = (0.01, 0.005)
    relearn_budgets: tuple[int, ...] = (5, 10, 20, 40)
    relearn_draws: int = 1
    relearn_k: int = 5
    relearn_retain_k: int = 2
    relearn_eval_rows: int = 120
    relearn_steps: int = 10
    relearn_lr: float = 0.01
    bn_recalibration: bool = True
    bn_samples: int = 1024
    head_refit: bool = True
    head_refit_shots: int = 1
    head_refit_draws: int = 20
    head_refit_max_retain: int = 5000
    head_relearn: bool = True
    head_relearn_lr: float = 0.01
    head_relearn_steps: tuple[int, ...] = (10, 40)
    relearn: bool = True
    resurface_max_forget: int = 256
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
        for name in ("kept_margin", "recovery_margin"):
            if not 0.0 < getattr(self, name) < 1.0:  # NaN fails too
                raise UserError(f"{name} is a fraction of the original's excess and must lie in (0, 1), got "
                                f"{getattr(self, name)}")
        if self.told_apart_level is None:  # the flag's level, whatever the confidence
            object.__setattr__(self, "told_apart_level", round(1.0 - self.confidence, 12))
        if not 1.0 - self.confidence - 1e-12 <= self.told_apart_level < 1.0:  # NaN fails too
            raise UserError(f"told_apart_level must lie in [1 - confidence, 1) = [{1.0 - self.confidence:g}, 1) (a "
                            f"statistic that flags is told apart too), got {self.told_apart_level}")
        self._check_joint_and_mlp_probe()
        if self.audit_seed is not None and not 0 <= self.audit_seed < 2 ** 32:
            raise UserError(f"audit_seed must be in 0..{2 ** 32 - 1}, got {self.audit_seed}")
        if not self.relearn_lrs or not all(v > 0 for v in self.relearn_lrs):
            raise UserError(f"relearn_lrs must be learning rates > 0, got {list(self.relearn_lrs)}")
        for name in ("relearn_budgets", "head_relearn_steps"):
            steps = getattr(self, name)
            if not steps or not all(v >= 1 for v in steps) or len(set(steps)) != len(steps):
                raise UserError(f"{name} must be distinct numbers of steps >= 1, got {list(steps)}")
        if not self.relearn_lr > 0:
            raise UserError(f"relearn_lr must be > 0, got {self.relearn_lr}")
        if self.n_jobs is not None and not (self.n_jobs == -1 or self.n_jobs >= 1):
            raise UserError(f"n_jobs (--jobs) must be -1 (every core) or >= 1, not {self.n_jobs}")
        if not self.head_relearn_lr > 0:
            raise UserError(f"head_relearn_lr must be > 0, got {self.head_relearn_lr}")
        for name in ("auroc_margin", "lpr_margin", "spread_factor", "collapse_margin", "not_forgotten_margin"):
            if not getattr(self, name) >= 0:  # NaN fails too
                raise UserError(f"{name} must be >= 0")
        for name in ("cka_max_samples", "max_probe_samples", "sample_level_max_per_side", "min_forget",
                     "knn_k", "bn_samples", "resurface_max_forget", "relearn_k", "relearn_steps",
                     "relearn_draws", "relearn_retain_k", "relearn_eval_rows", "kernel_probe_splits",
                     "kernel_probe_landmarks", "mlp_probe_seeds", "mlp_probe_max_retain", "head_refit_shots",
                     "head_refit_draws", "head_refit_max_retain",
                     "batch_size", "min_test_forget", "idi_trials", "idi_steps",
                     "idi_batch_size", "idi_max_per_side"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be >= 1")

    def _check_joint_and_mlp_probe(self) -> None:
        if not 0.0 < self.joint_level <= 0.5:  # NaN fails too
            raise UserError(f"joint_level must lie in (0, 0.5], got {self.joint_level}")
        if self.mlp_probe not in MLP_PROBE:
            raise UserError(f"mlp_probe must be one of {', '.join(MLP_PROBE)}, not {self.mlp_probe!r}")
        if not 0.0 < self.mlp_probe_level <= 0.5:  # NaN fails too
            raise UserError(f"mlp_probe_level must lie in (0, 0.5], got {self.mlp_probe_level}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]
