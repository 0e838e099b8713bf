"""The unlearnkit command line with float64 as the default dtype, for tests/integration/test_torchrun.py:

    torchrun --standalone --nproc_per_node 2 tests/integration/ddp_worker.py run --config cfg.yaml

In float64 the rounding differences between one process and two are ~1e-16, far too small to flip
a ReLU or max-pool decision, so the comparison checks the algorithm itself (see the test).
"""
import sys

import torch

torch.set_default_dtype(torch.float64)

from unlearnkit.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.argv = ["unlearnkit", *sys.argv[1:]]
    main()
