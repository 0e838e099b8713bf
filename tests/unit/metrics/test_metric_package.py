import ast
from pathlib import Path

import unlearnkit.metrics as metrics

METRICS_DIR = Path(metrics.__file__).parent


def test_metric_info_names_are_exported_callables():
    assert metrics.METRIC_INFO
    for name, text in metrics.METRIC_INFO.items():
        assert name in metrics.__all__ and callable(getattr(metrics, name)), name
        assert isinstance(text, str) and text and "\n" not in text
    for name in metrics.__all__:
        assert hasattr(metrics, name), name


def test_metrics_import_nothing_else_from_unlearnkit():
    for path in METRICS_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.level <= 1, f"{path.name} imports from outside metrics"
                assert not (node.module or "").startswith("unlearnkit"), f"{path.name}: {node.module}"
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("unlearnkit") for a in node.names), path.name
