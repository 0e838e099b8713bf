"""BS: FGSM in [0, 1] pixel space (bound 0.1, 1/255 grid) on the frozen original."""
import torch

from unlearnkit.methods import METHODS
from unlearnkit.methods.boundary_shrink import fgsm_pixel


def test_adversarial_pixels_within_bound_and_on_grid(digits_split, digits_original):
    f = digits_split.train_forget
    x, y = next(f.batches(64))
    adv = fgsm_pixel(digits_original.eval(), x, y, 0.1, f.mean, f.std)
    m = torch.tensor(f.mean).view(1, -1, 1, 1)
    s = torch.tensor(f.std).view(1, -1, 1, 1)
    pix, adv_pix = x * s + m, adv * s + m
    assert adv_pix.min() >= -1e-6 and adv_pix.max() <= 1 + 1e-6
    assert ((adv_pix * 255) - (adv_pix * 255).round()).abs().max() < 1e-3
    # |x' - x| <= bound, up to the rounding of the clean pixel onto the 1/255 grid
    assert (adv_pix - pix).abs().max() <= 0.1 + 0.5 / 255 + 1e-5
    assert (adv_pix - pix).abs().max() > 0.09  # it did step


def test_nearest_wrong_labels_come_from_the_original(digits_split, digits_original):
    res = METHODS.get("BS").from_preset("small", epochs=2).unlearn(digits_original, digits_split,
                                                                    original=digits_original, seed=0)
    assert [h["epoch"] for h in res.history] == [1, 2]
    # the frozen original is attacked every iteration: same success rate in every epoch
    rates = [h["attack_success"] for h in res.history]
    assert 0 < rates[0] <= 1 and rates[0] == rates[1]
