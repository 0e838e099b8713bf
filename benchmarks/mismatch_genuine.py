"""Are genuine retrains flagged on TARF's ``model_mismatch`` task? (the ``not_forgotten`` rule and the references'
integrity check read the references' own spread since 2026-12-07; docs/audit.md, "References are evidence")

    .venv/bin/python benchmarks/mismatch_genuine.py [--seeds 0,1,2] [--references 5]

On ``model_mismatch`` (digits, class 3 of the concept [3, 8], small_cnn, the default recipe) retrains predict
part of the forget set by themselves, and their forget accuracy varies by seed (17-42 % measured). Per seed s the
original is seed s, the references retrains s .. s + K - 1 (as ``unlearnkit run --seed s --references K``), and
two genuine held-out retrains (seeds 100 + 2s, 101 + 2s) are audited with a fixed audit seed (1234 + their seed).
Prints each audit's verdict, the retrain's forget accuracy and the references'. A genuine retrain must never
read ``not_forgotten`` or ``suppressed``. Models come from the project's model cache (trained when missing).
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("UNLEARNKIT_PROGRESS", "0")


def trained(exp, kind: str, seeds: list[int]) -> list:
    """The cached (or newly trained) models of ``kind`` for ``seeds`` on the experiment's split and recipe."""
    from unlearnkit.training import reference_models

    return [r.model for r in reference_models(kind, exp.split, exp.model_name, exp.recipe, seeds=seeds,
                                              model_kwargs=exp.model_kwargs, progress=False)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--references", type=int, default=5)
    a = ap.parse_args()
    from unlearnkit.audit import AuditConfig, audit
    from unlearnkit.config import RunConfig
    from unlearnkit.runner import prepare

    flagged = total = 0
    for seed in (int(s) for s in a.seeds.split(",")):
        cfg = RunConfig(dataset="digits", model="small_cnn", task="model_mismatch", forget_classes=[3], seed=seed,
                        device="cpu")
        exp = prepare(cfg, progress=False)
        original = trained(exp, "original", [seed])[0]
        refs = trained(exp, "retrain", list(range(seed, seed + a.references)))
        for g in (100 + 2 * seed, 101 + 2 * seed):
            rep = audit(original, trained(exp, "retrain", [g])[0], refs, exp.split,
                        config=AuditConfig(audit_seed=1234 + g))
            ref_acc = [round(m["forget_acc"], 1) for m in rep.models["retrained"]["per_reference"]]
            total += 1
            flagged += rep.verdict in ("not_forgotten", "suppressed")
            print(f"seed {seed} genuine retrain {g}: {rep.verdict_line:28s} its forget accuracy "
                  f"{rep.models['unlearned']['outputs']['forget_acc']:.1f} %, the references' {ref_acc}", flush=True)
    print(f"genuine retrains flagged: {flagged} of {total}")


if __name__ == "__main__":
    main()
