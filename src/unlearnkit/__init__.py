"""unlearnkit: make an image classifier forget, then certify whether it really forgot."""
from . import audit  # noqa: E402  (the package; called, it audits: unlearnkit.audit.user.audit_models)
from ._version import __version__  # noqa: E402
from .api import unlearn  # noqa: E402
from .audit import AuditResult  # noqa: E402
from .checkpoints import load_checkpoint, save_checkpoint  # noqa: E402
from .data.datasets import DATASETS, load_dataset  # noqa: E402
from .data.splits import ForgetSpec, UnlearningSplit, make_split  # noqa: E402
from .models.features import capture, extract  # noqa: E402
from .models.zoo import MODELS, audit_layers, create_model  # noqa: E402
from .runtime import tune_cpu_allocator  # noqa: E402

__all__ = ["__version__", "load_checkpoint", "save_checkpoint", "DATASETS", "load_dataset", "ForgetSpec",
           "UnlearningSplit", "make_split", "capture", "extract", "MODELS", "audit_layers", "create_model",
           "unlearn", "audit", "AuditResult", "tune_cpu_allocator"]
