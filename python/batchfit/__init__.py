"""batchfit from Python: the GPU memory of a training step, predicted in
milliseconds without a GPU, for the zoo's models, a config or file, or your
own ``nn.Module``::

    import batchfit
    r = batchfit.estimate(model, torch.randn(8, 3, 224, 224), targets=torch.zeros(8, dtype=torch.long),
                          batch_size=64, gpu="a100-40gb", precision="bf16-mixed")
    r.fits, r.device_total_bytes, r.breakdown, r.band, r.notes

The answers are the command line's (``batchfit estimate … --json``), run by
the binary this package carries; ``batchfit.lightning`` and
``batchfit.huggingface`` set a trainer's batch size from them.
"""

from ._version import __version__
from .api import estimate, max_batch, plan, sweep
from .errors import BatchfitError, CaptureError, UsageError
from .results import Band, Estimate, MaxBatch, Note, Plan, PlanEntry, Sweep

__all__ = [
    "__version__", "estimate", "max_batch", "sweep", "plan",
    "BatchfitError", "UsageError", "CaptureError",
    "Estimate", "MaxBatch", "Sweep", "Plan", "PlanEntry", "Band", "Note",
]
