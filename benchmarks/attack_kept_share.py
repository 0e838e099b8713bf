"""How much of the original's excess an attacked model keeps, by probes the audit does not read (issue 42).

    .venv/bin/python benchmarks/attack_kept_share.py digits 1       # dataset, seed: the attack suite's models

For the attack suite's ``hardened`` and ``matcher`` models of one dataset and seed (from its cache), the seed's
original, its five references and two genuine held-out retrains: at the penultimate layer (train forget vs
retained rows, standardised units), the held-out kernel Fisher discriminant with an RBF kernel at 0.1 to 4 times
the median-heuristic bandwidth, and a torch MLP probe (held-out log d'² and log loss); per statistic, the
original's excess over the references in their standard deviations (D) and each model's kept fraction
(u − r̄) / (o − r̄). docs/audit.md quotes it for the one attack that read ``erased`` (digits, seed 1).
"""
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

import attack_suite as S  # noqa: E402

from unlearnkit import ForgetSpec, load_dataset, make_split  # noqa: E402
from unlearnkit.evaluation import model_outputs  # noqa: E402
from unlearnkit.metrics.kernel_probe import _dprime2, kernel_probe, probe_splits  # noqa: E402
from unlearnkit.metrics.prepare import prepare  # noqa: E402

torch.set_num_threads(1)


def mlp(z: torch.Tensor, y: np.ndarray, sp, hidden: int = 64, steps: int = 300) -> tuple[float, float]:
    """(log held-out d'², log held-out log loss) of a one-hidden-layer MLP probe, Adam, class-balanced."""
    vals, losses = [], []
    yy = torch.from_numpy(y)
    for i, te_np in enumerate(sp.held_out):
        te = torch.from_numpy(te_np)
        torch.manual_seed(i)
        net = torch.nn.Sequential(torch.nn.Linear(z.shape[1], hidden), torch.nn.ReLU(),
                                  torch.nn.Linear(hidden, 1)).double()
        opt = torch.optim.Adam(net.parameters(), lr=1e-2, weight_decay=1e-4)
        xt, yt = z[~te], yy[~te].double()
        pw = (1 - yt).sum() / yt.sum()
        for _ in range(steps):
            opt.zero_grad()
            F.binary_cross_entropy_with_logits(net(xt)[:, 0], yt, pos_weight=pw).backward()
            opt.step()
        with torch.no_grad():
            s = net(z[te])[:, 0]
        vals.append(_dprime2(s[yy[te]], s[~yy[te]]))
        losses.append(float(F.binary_cross_entropy_with_logits(s, yy[te].double())))
    return math.log(max(float(np.mean(vals)), 1e-6)), math.log(float(np.mean(losses)))


def main(ds: str, seed: int) -> None:
    split = make_split(load_dataset(ds), ForgetSpec(classes=(3,)))
    cache = Path.home() / ".cache" / "unlearnkit" / "attacks"
    orig = S.model_of("original", split, seed)
    models = {"original": orig, **{f"ref{i}": S.model_of("retrain", split, seed + i) for i in range(5)},
              "gen0": S.model_of("retrain", split, 100 + 2 * seed),
              "gen1": S.model_of("retrain", split, 101 + 2 * seed)}
    for fam in ("hardened", "matcher"):
        models[fam] = S.cached_attack(fam, orig, S.model_of("retrain", split, 1000 + seed), split, seed, cache)[0]
    stats, sp = {}, None
    for name, m in models.items():
        o = model_outputs(m, split, ["penultimate"])
        f, r = o["train_forget"]["penultimate"].double(), o["train_retain"]["penultimate"].double()
        x, y = torch.cat([f, r]), np.r_[np.ones(len(f), bool), np.zeros(len(r), bool)]
        sp = sp or probe_splits(y, seed=12345, splits=3, landmarks=200)
        z = prepare(x).standardised(x)
        row = {f"rbf x{k}": kernel_probe(z, y, sp, kernel="rbf", width=k) for k in (0.1, 0.25, 0.5, 1.0, 2.0, 4.0)}
        d, loss = mlp(z, y, sp)
        row["mlp log d'2"], row["-mlp log loss"] = d, -loss
        stats[name] = row
        print(name, {k: round(v, 3) for k, v in row.items()}, flush=True)
    for stat in stats["original"]:
        r = np.array([stats[f"ref{i}"][stat] for i in range(5)])
        o, rb, s = stats["original"][stat], r.mean(), r.std(ddof=1)
        kept = {k: (stats[k][stat] - rb) / (o - rb) for k in ("hardened", "matcher", "gen0", "gen1")}
        print(f"{stat:14s} D={(o - rb) / s:7.1f}  kept " + " ".join(f"{k} {v:+.2f}" for k, v in kept.items()))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
