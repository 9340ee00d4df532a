"""Which rows each optimizer step trains on, in each process, and a loss that does not care how
they were split: what makes N processes train the weights one process would.

Vocabulary: the *global batch* of step s is `batch_size` rows chosen from s and the seed alone
(epoch e = s // steps_per_epoch walks a seeded permutation of all rows), so it is the same for
every world size and after a resume. Each process takes every world_size-th row of it (its
*share*) and runs its share in *micro-batches* of at most `micro_batch_size` rows, accumulating
gradients.

ModelOpt's EAGLE-3 loss for train-time-test step k is a mean over the valid positions of the
rows it is given: sum_k / count_k. Split across micro-batches and processes, equal-weight averaging
of those means is not the global batch's mean when rows differ in length. `GlobalMeanLoss` rescales
each micro-batch's step-k loss (ModelOpt's own `_eagle_loss`, wrapped) by count_k(micro) /
count_k(global batch); the sum over micro-batches and processes is then exactly the one-process
loss of the whole global batch, and so are its gradients (DDP averages over processes, so the
backward pass multiplies by world_size). Training accuracy is reweighted the same way.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from trtspec.convert.eagle3 import modelopt_compat
from trtspec.convert.eagle3.device import host_buffer, to_device
from trtspec.convert.eagle3.store import FeatureStore

if TYPE_CHECKING:
    import torch

EPS = 1e-5  # ModelOpt's _eagle_loss adds this to its denominator


@lru_cache(maxsize=2)
def _epoch_order(num_rows: int, seed: int, epoch: int) -> tuple[int, ...]:
    import torch

    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return tuple(torch.randperm(num_rows, generator=generator).tolist())


def global_batch(step: int, *, num_rows: int, batch_size: int, seed: int) -> list[int]:
    """Row numbers of optimizer step `step` (0-based); every epoch drops its last partial batch."""
    per_epoch = max(1, num_rows // batch_size)
    epoch, offset = divmod(step, per_epoch)
    return list(_epoch_order(num_rows, seed, epoch)[offset * batch_size:(offset + 1) * batch_size])


def share(rows: list[int], rank: int, world_size: int) -> list[int]:
    return rows[rank::world_size]


def micro_batches(rows: list[int], micro_batch_size: int) -> list[list[int]]:
    return [rows[start:start + micro_batch_size] for start in range(0, len(rows), micro_batch_size)]


def loss_counts(lengths: torch.Tensor, ttt_steps: int) -> list[float]:
    """Valid loss positions of each train-time-test step for rows of these lengths.

    Step k compares the head's output at positions k.. with the target's at k+1.., masked by the
    attention mask: a row of n tokens contributes max(0, n - 1 - k).
    """
    return [float((lengths - 1 - k).clamp(min=0).sum()) for k in range(ttt_steps)]


class GlobalMeanLoss:
    """Within `with`, `model._eagle_loss` returns its micro-batch's share of the global batch's loss.

    Set `local` (loss_counts of the micro-batch's rows, known on the host: no device sync) before
    each micro-batch's forward. `accuracy` sums the reweighted per-step accuracies (tensors).
    """

    def __init__(self, model, counts: list[float], length: int):
        self.model, self.counts, self.length = model, counts, length
        self.local: list[float] = list(counts)
        self.accuracy: list[Any] = [0.0] * len(counts)

    def __enter__(self) -> GlobalMeanLoss:
        # ModelOpt's _eagle_loss signature and return differ between 0.37 and 0.47: the wrapper
        # in modelopt_compat calls `share` with the step, the loss terms and the accuracy.
        self.model._eagle_loss = modelopt_compat.wrap_eagle_loss(self.model, self.length, self._share)
        return self

    def _share(self, step: int, accuracy):
        """The weight of step `step`'s loss for this micro-batch; records its accuracy."""
        weight = (self.local[step] + EPS) / (self.counts[step] + EPS)
        self.accuracy[step] = self.accuracy[step] + accuracy * (self.local[step] / max(1.0, self.counts[step]))
        return weight

    def __exit__(self, *exc: Any) -> None:
        self.model.__dict__.pop("_eagle_loss", None)


class BatchReader:
    """Reads micro-batches from the feature store in a background thread, one ahead of the step."""

    def __init__(self, store: FeatureStore, device: torch.device):
        self.store, self.device = store, device
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="eagle3-read")

    def submit(self, rows: list[int]) -> Future:
        return self._pool.submit(self._read, rows)

    def _read(self, rows: list[int]) -> dict[str, torch.Tensor]:
        return {name: self.store.read(name, rows, host_buffer((len(rows), *spec.shape),
                                                               _torch_dtype(spec.dtype), self.device))
                for name, spec in self.store.arrays.items()}

    def to_inputs(self, host: dict[str, torch.Tensor]) -> tuple[Any, Any, dict[str, Any]]:
        """(input_ids, attention_mask, ModelOpt's base_model_outputs) on the device."""
        import torch

        on_device = {name: to_device(tensor, self.device) for name, tensor in host.items()}
        length = on_device["input_ids"].shape[1]
        positions = torch.arange(length, device=self.device)
        attention = (positions[None, :] < on_device["lengths"][:, None]).long()
        outputs = {"base_model_hidden_states": on_device["hidden"].float(),
                   "aux_hidden_states": on_device["aux"].float(),
                   "base_model_input_embeds": on_device["embeds"].float()}
        if "logits" in on_device:
            outputs["base_model_logits"] = on_device["logits"].float()
        return on_device["input_ids"].long(), attention, outputs

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _torch_dtype(name: str):
    import torch

    return getattr(torch, name)
