import pytest

from unlearnkit.config import load_config
from unlearnkit.errors import UnknownNameError, UserError
from unlearnkit.registry import Registry


def test_registry_aliases_and_did_you_mean():
    r = Registry("thing")
    r.add("gradient_ascent", 1, "GA")
    assert r.get("GA") == 1 and r.get("gradient_ascent") == 1 and r.canonical("ga") == "gradient_ascent"
    with pytest.raises(UnknownNameError, match="did you mean 'gradient_ascent'"):
        r.get("gradient_ascnt")
    with pytest.raises(ValueError):
        r.add("ga", 2)  # alias already taken
    assert r.names() == ["gradient_ascent"] and "GA" in r and r.aliases_of("GA") == ["ga"]


def test_config_yaml_and_overrides(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("dataset: digits\nforget-classes: [1, 2]\nmethods: finetune\nrecipe: {epochs: 2}\n")
    cfg = load_config(f, {"seed": 4, "methods": None})
    assert cfg.dataset == "digits" and cfg.forget_classes == [1, 2] and cfg.methods == ["finetune"]
    assert cfg.seed == 4 and cfg.recipe == {"epochs": 2}


@pytest.mark.parametrize("text, msg", [("datset: digits\n", "did you mean 'dataset'"),
                                       ("- a\n- b\n", "mapping"), ("a: [\n", "not valid YAML"),
                                       ("preset: huge\n", "preset")])
def test_config_errors(tmp_path, text, msg):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(UserError, match=msg):
        load_config(f)
