"""Bad Teacher: KL to the incompetent teacher on D_f, to the competent one on the D_r subset."""
import torch
import torch.nn.functional as F

from unlearnkit.methods import METHODS
from unlearnkit.methods.bad_teacher import bad_teacher_loss, unlearning_data


def test_loss_matches_reference_formula():
    torch.manual_seed(0)
    s, c, u = torch.randn(6, 5), torch.randn(6, 5), torch.randn(6, 5)
    flag = torch.tensor([1, 0, 1, 0, 0, 1])
    f = flag.float().unsqueeze(1)
    target = f * F.softmax(u, 1) + (1 - f) * F.softmax(c, 1)
    ref = (target * (target.log() - F.log_softmax(s, 1))).mean()
    assert torch.allclose(bad_teacher_loss(s, flag, c, u), ref, atol=1e-6)
    # zero when the student copies the right teacher for each row
    mixed = torch.where(flag.bool().unsqueeze(1), u, c)
    assert bad_teacher_loss(mixed, flag, c, u).abs() < 1e-6


def test_unlearning_data_uses_30_percent_of_retain(digits_split):
    gen = torch.Generator().manual_seed(0)
    d = unlearning_data(digits_split.train_forget, digits_split.train_retain, 0.3, gen)
    nf, nr = len(digits_split.train_forget), int(0.3 * len(digits_split.train_retain))
    assert len(d) == nf + nr and int(d.y.sum()) == nf


def test_student_moves_to_the_incompetent_teacher_on_forget(digits_split, digits_original):
    res = METHODS.get("BadT").from_preset("small").unlearn(digits_original, digits_split,
                                                           original=digits_original, seed=0)
    x = digits_split.train_forget.normalize(digits_split.train_forget.x)
    with torch.no_grad():
        p = F.softmax(res.model(x), 1)
    assert p.max(1).values.mean() < 0.6  # close to the random teacher's flat outputs
