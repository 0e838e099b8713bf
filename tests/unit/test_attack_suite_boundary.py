"""``benchmarks/attack_suite.py``: the ground truth's kept share (by hand), the boundary table's counts
(attacked models: parents only; genuine retrains: every one, their ``copy`` names the retrain), an attack
that diverges keeping its last good epoch, the hide families' adversary score (by hand), and a build's own random
stream."""
from __future__ import annotations

import math

import pytest
from bench_modules import benchmark_module


@pytest.fixture(scope="module")
def suite():
    return benchmark_module("attack_suite", register=True)


def test_kept_share_is_the_log_scale_fraction_of_the_originals_excess(suite):
    genuine = [{"probe": math.exp(-2)}, {"probe": math.exp(-4)}, {"probe": None}]  # centre: -3 in log
    assert suite.kept_share(math.exp(-4.5), math.exp(-6), genuine) == pytest.approx(0.5)
    assert suite.kept_share(math.exp(-6), math.exp(-6), genuine) == pytest.approx(1.0)
    assert suite.kept_share(math.exp(-3), math.exp(-6), genuine) == pytest.approx(0.0)
    assert suite.kept_share(None, math.exp(-6), genuine) is None
    assert suite.kept_share(0.1, math.exp(-6), [{"probe": None}]) is None


def test_boundary_counts_erased_by_kept_share_parents_only(suite):
    def row(family, share, verdict, copy=""):
        return {"family": family, "copy": copy, "gt_kept_share": share, "verdict": verdict}

    rows = [row("hardened", 0.3, "erased"), row("hardened", 0.3, "erased", copy="compose"),
            row("hardened", 0.6, "suppressed"), row("hardened", 0.9, "erased"),
            row("genuine", 0.1, "erased", copy="retrain100"),
            row("genuine", 0.2, "inconclusive", copy="retrain101"), row("matcher", None, "erased")]
    lines = suite.boundary(rows)
    assert lines[2].startswith("| below 0.25 | 0 | - | 2 | 1 [")
    assert lines[3].startswith("| 0.25 to 0.5 | 1 | 1 [")  # the copy is not counted
    assert lines[4].startswith("| 0.5 to 0.75 | 1 | 0 [")
    assert lines[5].startswith("| 0.75 or more | 1 | 1 [")


def test_an_attack_that_diverges_keeps_its_last_good_epoch(suite, monkeypatch):
    import torch

    import unlearnkit as uk

    split = uk.make_split(uk.load_dataset("digits"), uk.ForgetSpec(classes=(3,)))
    torch.manual_seed(0)
    ds = split.dataset
    model = uk.models.zoo.create_model("small_cnn", ds.num_classes, ds.in_channels, ds.image_size).eval()
    calls = []

    def epoch(self, step):
        calls.append(step)
        if len(calls) == 2:
            raise torch.linalg.LinAlgError("not positive-definite")
        with torch.no_grad():
            for p in self.model.parameters():
                p += 1.0
        return suite.np.zeros(4), step + 1

    monkeypatch.setattr(suite.Attack, "_epoch", epoch)
    logged = []
    out = suite.Attack(model, model, split, seed=0, match=False, keep=None, harden=False, epochs=5,
                       log=logged.append).run()
    assert len(calls) == 2 and "diverged in epoch 2" in logged[-1]
    for name, p in out.state_dict().items():
        if p.is_floating_point() and name in dict(model.named_parameters()):
            assert torch.equal(p, dict(model.named_parameters())[name] + 1.0)


def test_naturalising_batchnorm_keeps_the_function_and_makes_re_estimation_a_no_op(suite):
    """The adaptive attack's last step: a canonical copy (BatchNorm folded: running mean 0, variance 1 - eps)
    computes another function once its statistics are re-estimated; naturalised, the same function, and
    re-estimating on the same rows changes the logits by rounding only."""
    import copy

    import torch

    from unlearnkit.audit.canonical import canonicalize
    from unlearnkit.models.zoo import create_model

    torch.manual_seed(0)
    model = create_model("small_cnn", num_classes=10, in_channels=1, image_size=8).eval()
    x = torch.randn(256, 1, 8, 8)
    with torch.no_grad():  # non-trivial running statistics, as after training
        model.train()
        model(x)
        model.eval()
    canon, why = canonicalize(model)
    assert why is None

    def re_estimated(m):
        m = copy.deepcopy(m)
        for b in m.modules():
            if isinstance(b, torch.nn.modules.batchnorm._BatchNorm):
                b.reset_running_stats()
                b.momentum = None
        m.train()
        with torch.no_grad():
            m(x)
        return m.eval()

    with torch.no_grad():
        before = canon(x)
        assert not torch.allclose(re_estimated(canon)(x), before, atol=1e-3)  # canonical: another function
        nat = copy.deepcopy(canon)
        suite.naturalise_bn(nat, x)
        assert torch.allclose(nat(x), before, atol=1e-4)
        assert torch.allclose(re_estimated(nat)(x), before, atol=1e-3)


def test_the_suites_rescaled_copies_are_exact_in_float32(suite):
    """A unit scaled by 2^-120 would push its small incoming weights below float32's normal range, whose lost
    bits 40 relearning steps amplified (a deciding number moved 2.6 %): ``exact=True`` moves such exponents toward
    0, and the copy's canonical form then equals the model's bit for bit."""
    import torch

    from unlearnkit.audit.canonical import canonicalize
    from unlearnkit.models.zoo import small_cnn

    reparam = suite.sibling("attack_reparam")
    torch.manual_seed(0)
    model = small_cnn(10, in_channels=1, image_size=8).eval()
    with torch.no_grad():
        model.fc1[0].weight[:, :4] = 1e-7  # 1e-7 x 2^-120 is subnormal
    s = reparam.powers_of_two(model.fc1[0].out_features, 120, torch.Generator().manual_seed(0))
    fitted = reparam.exact_powers(s, reparam._linear_in(model.fc1[0]), model.fc.weight)
    assert (fitted != s).any() and (fitted.log2() == fitted.log2().round()).all()
    scaled = (reparam._linear_in(model.fc1[0]) * fitted[:, None])
    assert (scaled[scaled != 0].abs() >= torch.finfo(torch.float32).tiny).all()
    canonical = canonicalize(model)[0].state_dict()
    for tag, copy in reparam.copies(model, 0, exact=True).items():
        if "scale" in tag or tag == "compose":
            other = canonicalize(copy)[0].state_dict()
            assert all(torch.equal(canonical[k], other[k]) for k in canonical), tag


@pytest.mark.parametrize("utility, rises", [(0.01, True), (1e6, False), (None, False)])
def test_the_util_families_raise_the_retained_cross_entropys_weight_while_it_is_above_the_constraint(
        suite, utility, rises):
    """Dual ascent (the ``_util`` families): an untrained model's retained cross-entropy (about 2.3) is above a
    constraint of 0.01, so its weight rises from 1 (to at most 100); above it or without one, it stays 1."""
    split, model, _ = _two_untrained_models()
    attack = suite.Attack(model, model, split, seed=0, match=False, keep=None, harden=False, epochs=1,
                          utility=utility, log=lambda text: None)
    attack.opt = attack._optimizer()
    attack._epoch(0)
    assert (1.0 < attack.ce_weight <= 100.0) if rises else attack.ce_weight == 1.0
    assert "hardened_tight_util" in suite.FAMILIES and "hardened_joint_util" in suite.FAMILIES


def _two_untrained_models():
    """The digits split (class 3) and two untrained small CNNs of it (seeded)."""
    import torch

    import unlearnkit as uk
    from unlearnkit.models.zoo import create_model

    split = uk.make_split(uk.load_dataset("digits"), uk.ForgetSpec(classes=(3,)))
    ds = split.dataset
    torch.manual_seed(0)
    a, b = (create_model("small_cnn", ds.num_classes, ds.in_channels, ds.image_size).eval() for _ in range(2))
    return split, a, b


def test_the_centre_families_match_the_mean_of_their_teachers_statistics(suite, monkeypatch):
    """``hardened_centre``: with several teachers, each matched statistic's target is the mean of the teachers'
    values (here each statistic stubbed as the forget rows' mean feature, so the target is (1 + 3) / 2 = 2), and the
    teachers' cached outputs are what a forward pass of the same rows gives."""
    import torch

    split, a, b = _two_untrained_models()
    attack = suite.Attack(a, a, split, seed=0, match=True, keep=None, harden=False, epochs=1, more_teachers=(b,),
                          log=lambda text: None)
    fb, rb = torch.tensor([0, 5, 7]), torch.tensor([1, 2, 40, 41])
    got = attack._teacher_out(fb, rb)
    assert len(got) == 2
    logits, feats = suite._pooled(b, attack.layers, torch.cat([attack.xf[fb], attack.xr[rb]]))
    assert torch.allclose(got[1][0], logits, atol=1e-5)
    assert all(torch.allclose(got[1][1][k], feats[k], atol=1e-5) for k in attack.layers)

    monkeypatch.setattr(suite, "_log_mahalanobis", lambda f, r, **kw: f.mean())
    monkeypatch.setattr(suite, "_log_kfd", lambda f, r, kernel, g, **kw: f.mean())
    nf = 2

    def feats_of(value):
        return {k: torch.cat([torch.full((nf, 3), value), torch.zeros(4, 3)]) for k in attack.layers}

    teachers = [feats_of(1.0), feats_of(3.0)]
    n_stats = 3 * len(attack.layers)  # the separability and two kernel probes per layer
    assert float(attack._matching(feats_of(2.0), teachers, nf)) == pytest.approx(0.0)
    assert float(attack._matching(feats_of(0.0), teachers, nf)) == pytest.approx(4.0 * n_stats)
    assert float(attack._matching(feats_of(0.0), teachers[:1], nf)) == pytest.approx(1.0 * n_stats)
    assert {"hardened_centre", "hardened_centre_keep3"} <= set(suite.FAMILIES)


def test_canonical_targets_relearn_the_teachers_canonical_copies(suite):
    """``hardened_centre_canon``: the relearning targets come from the teachers' canonical copies (the same function,
    other weights: what the audit relearns); without the option, from the teachers themselves."""
    import torch

    split, a, b = _two_untrained_models()
    plain = suite.Attack(a, a, split, seed=0, match=False, keep=None, harden=True, epochs=1, more_teachers=(b,),
                         log=lambda text: None)
    assert plain.relearn_teachers == (a, b)
    canon = suite.Attack(a, a, split, seed=0, match=False, keep=None, harden=True, epochs=1, more_teachers=(b,),
                         canonical_targets=True, log=lambda text: None)
    x = canon.xf[:16]
    for teacher, copy_ in zip((a, b), canon.relearn_teachers):
        assert copy_ is not teacher
        with torch.no_grad():
            assert torch.allclose(copy_(x), teacher(x), atol=1e-4)
        conv = next(m for m in copy_.modules() if isinstance(m, torch.nn.Conv2d))
        assert not torch.allclose(conv.weight, next(m for m in teacher.modules()
                                                    if isinstance(m, torch.nn.Conv2d)).weight)
    assert "hardened_centre_canon" in suite.FAMILIES


def test_the_hide_families_adversary_is_scored_on_the_rows_it_was_not_fitted_on(suite):
    """``hardened_centre_hide_held`` scores its adversary on held-out rows only, forget and retained rows weighted to
    their shares of the training split; ``hardened_centre_hide`` on every row of the batch; the push stops at the
    target. Computed by hand on a constant adversary (every logit 0: each row's loss log 2) and a linear one."""
    import torch

    attack = object.__new__(suite.Attack)
    attack.xf, attack.xr = torch.zeros(4, 1), torch.zeros(12, 1)  # shares 1/4 and 3/4
    attack.adv_mu, attack.adv_sd = torch.zeros(2), torch.ones(2)
    attack.adversary = torch.nn.Linear(2, 1).requires_grad_(False)
    with torch.no_grad():
        attack.adversary.weight.copy_(torch.tensor([[1.0, 0.0]]))
        attack.adversary.bias.zero_()
    fb, rb = torch.tensor([0, 1, 2]), torch.tensor([5, 6])
    pen = torch.tensor([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [-1.0, 0.0], [0.0, 0.0]])  # forget 0-2, retained 5-6

    def bce(z, y):
        return math.log1p(math.exp(-z)) if y else math.log1p(math.exp(z))

    attack.hide_held, attack.adv_rows = False, None
    every = attack._hide_score(pen, fb, rb)
    by_hand = 0.25 * sum(bce(z, 1) for z in (1, 2, 3)) / 3 + 0.75 * sum(bce(z, 0) for z in (-1, 0)) / 2
    assert float(every) == pytest.approx(by_hand)
    attack.hide_held, attack.adv_rows = True, (torch.tensor([0, 2]), torch.tensor([6, 9]))  # fitted on 0, 2 and 6
    held = attack._hide_score(pen, fb, rb)
    assert float(held) == pytest.approx(0.25 * bce(2, 1) + 0.75 * bce(-1, 0))
    attack.hide_target = float(held) / 2  # already above the target: no push
    assert float(attack._hide_loss(pen, fb, rb)) == 0.0
    attack.hide_target = float(held) * math.e  # below it by a factor e: (log e)^2
    assert float(attack._hide_loss(pen, fb, rb)) == pytest.approx(1.0)


def test_a_build_starts_from_its_own_random_stream_and_restores_the_processes(suite, monkeypatch):
    """``build`` seeds torch's global stream by family and seed (the kept probes and adversaries start there), so
    an attack does not depend on what the process drew before it; the process's stream is left as it was."""
    import torch

    monkeypatch.setattr(suite, "_build", lambda family, *a: torch.rand(3))
    torch.manual_seed(1)
    first = suite.build("matcher", None, None, None, 0)
    after = torch.rand(1)
    torch.manual_seed(2)
    assert torch.equal(suite.build("matcher", None, None, None, 0), first)
    torch.manual_seed(1)
    suite.build("hardened", None, None, None, 0)
    assert torch.equal(torch.rand(1), after)  # restored: as if the build had not drawn
    assert not torch.equal(suite.build("hardened", None, None, None, 0), first)
    assert not torch.equal(suite.build("matcher", None, None, None, 1), first)


def test_the_long_canon_family_is_the_canon_family_trained_twice_as_long(suite, monkeypatch):
    """``hardened_centre_canon_long``: every setting of ``hardened_centre_canon`` but the epochs, doubled (6 → 12 on
    mnist5k, 12 → 24 on digits)."""
    from types import SimpleNamespace

    seen = {}

    class Recorder:
        def __init__(self, *args, **kw):
            seen[len(seen)] = kw

        def run(self):
            return None

    monkeypatch.setattr(suite, "Attack", Recorder)
    monkeypatch.setattr(suite, "model_of", lambda kind, split, seed: seed)
    for name in ("digits", "mnist5k"):
        split = SimpleNamespace(forgotten_classes=(3,), dataset=SimpleNamespace(name=name))
        for family in ("hardened_centre_canon", "hardened_centre_canon_long"):
            suite._build(family, None, None, split, 0)
    canon_d, long_d, canon_m, long_m = (seen[i] for i in range(4))
    assert (canon_d["epochs"], long_d["epochs"], canon_m["epochs"], long_m["epochs"]) == (12, 24, 6, 12)
    assert {k: v for k, v in long_m.items() if k != "epochs"} == {k: v for k, v in canon_m.items() if k != "epochs"}
    assert long_m["canonical_targets"] and long_m["more_teachers"] == (2000, 3000, 4000)
