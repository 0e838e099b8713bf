import math

import numpy as np
import torch
from sklearn.svm import SVC

from unlearnkit import ForgetSpec, make_split
from unlearnkit.evaluation import model_outputs, output_metrics


def test_output_metrics_conventions(digits_split, digits_original):
    out = model_outputs(digits_original, digits_split)
    m = output_metrics(out, digits_split)
    lt = out["test"]["logits"]
    pred = lt.argmax(1)
    y = digits_split.test.y
    keep = y != 3
    assert math.isclose(m["test_retain_acc"], 100 * (pred[keep] == y[keep]).double().mean().item(), rel_tol=1e-9)
    assert math.isclose(m["test_forget_acc"], 100 * (pred[~keep] == y[~keep]).double().mean().item(), rel_tol=1e-9)
    assert m["test_acc"] == m["test_retain_acc"]  # SalUn: TA without the forgotten class
    assert output_metrics(out, digits_split, "purge")["test_acc"] == m["test_acc_full"]
    # SalUn's SVC-MIA by hand: first len(test_retain) retain samples vs retained-class test set
    def probs(z):
        return torch.softmax(z.double(), 1).numpy()

    pr = probs(out["train_retain"]["logits"])[: int(keep.sum())]
    pt = probs(lt[keep])
    pf = probs(out["train_forget"]["logits"])
    def conf(p, yy):
        return p[np.arange(len(yy)), yy][:, None]

    x = np.concatenate([conf(pr, digits_split.train_retain.y.numpy()[: len(pr)]), conf(pt, y[keep].numpy())])
    lab = np.r_[np.ones(len(pr)), np.zeros(len(pt))]
    clf = SVC(C=3, gamma="auto", kernel="rbf").fit(x, lab)
    expect = 100 * (1 - clf.predict(conf(pf, digits_split.train_forget.y.numpy())).mean())
    assert math.isclose(m["mia_efficacy"], expect)
    assert 0 <= m["mia_auc"] <= 1


def test_random_forgetting_has_no_test_forget(digits, digits_original):
    split = make_split(digits, ForgetSpec(random=0.1))
    m = output_metrics(model_outputs(digits_original, split), split)
    assert math.isnan(m["test_forget_acc"]) and m["test_acc"] == m["test_acc_full"]
