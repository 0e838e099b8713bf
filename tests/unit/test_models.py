import pytest
import torch

from unlearnkit import audit_layers, capture, create_model, extract
from unlearnkit.errors import UnknownNameError


@pytest.mark.parametrize("shape", [(1, 8, 8), (1, 28, 28), (3, 32, 32)])
def test_small_cnn_shapes(shape):
    m = create_model("small_cnn", num_classes=7, in_channels=shape[0], image_size=shape[1])
    assert m(torch.randn(2, *shape)).shape == (2, 7)
    assert audit_layers(m) == ["block1", "block2", "block3", "penultimate"]


def test_resnet18_cifar_stem_and_layers():
    m = create_model("resnet18", num_classes=10)
    assert m.conv1.kernel_size == (3, 3) and m.conv1.stride == (1, 1) and isinstance(m.maxpool, torch.nn.Identity)
    assert audit_layers(m) == ["layer1", "layer2", "layer3", "layer4", "penultimate"]
    m.eval()
    with capture(m, audit_layers(m)) as f:
        m(torch.randn(2, 3, 32, 32))
    assert {k: v.shape[1] for k, v in f.items()} == {"layer1": 64, "layer2": 128, "layer3": 256, "layer4": 512,
                                                     "penultimate": 512}


def test_torchvision_and_timm_models():
    m = create_model("torchvision:mobilenet_v3_small", num_classes=5, image_size=32)
    assert m(torch.randn(2, 3, 32, 32)).shape == (2, 5) and audit_layers(m)[-1] == "penultimate"
    t = create_model("timm:swin_tiny_patch4_window7_224", num_classes=4, image_size=32,
                     window_size=2, embed_dim=24, depths=(1, 1, 1, 1), num_heads=(1, 1, 1, 1))
    t.eval()
    layers = audit_layers(t)
    with capture(t, layers) as f:
        out = t(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 4) and len(layers) == 5
    assert [f[k].shape[1] for k in layers[:-1]] == [24, 48, 96, 192]  # NHWC stages pooled over space


def test_unknown_model():
    with pytest.raises(UnknownNameError, match="did you mean 'small_cnn'"):
        create_model("smal_cnn", 10)


def test_extract_one_pass_matches_capture_and_removes_hooks(digits):
    m = create_model("small_cnn", 10, 1, 8).eval()
    calls = []
    m.block1.register_forward_hook(lambda *a: calls.append(1))
    feats = extract(m, digits.test, audit_layers(m) + ["logits"], batch_size=100)
    n_batches = -(-len(digits.test) // 100)
    assert len(calls) == n_batches  # one forward pass for all layers
    x = torch.cat([x for x, _ in digits.test.batches(100)])
    with torch.no_grad(), capture(m, ["block2", "penultimate"]) as f:
        logits = m(x)
    assert torch.allclose(feats["block2"], f["block2"], atol=1e-5)
    assert torch.allclose(feats["logits"], logits, atol=1e-5)
    assert all(len(mod._forward_hooks) == (1 if mod is m.block1 else 0) for mod in m.modules())


def test_hooks_removed_on_error():
    m = create_model("small_cnn", 10, 1, 8)
    with pytest.raises(RuntimeError):
        with capture(m, audit_layers(m)):
            m(torch.randn(2, 3, 8, 8))  # wrong channel count
    assert all(not mod._forward_hooks and not mod._forward_pre_hooks for mod in m.modules())
