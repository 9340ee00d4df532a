"""Device placement and progress reporting, on the CPU this machine has.

CUDA itself is not exercised here (no GPU): these tests pin the device-agnostic contract that a
GPU run relies on: the device is resolved in one place, a missing GPU is refused in one line,
nothing in the training path moves tensors to the CPU by name, and library code only reports
progress through callbacks that cli/ draws.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from tests.convert.conftest import write_spec
from trtspec.errors import TrtSpecError

EAGLE3 = Path(__file__).resolve().parents[3] / "trtspec" / "convert" / "eagle3"


def test_auto_is_the_cpu_without_a_gpu_and_cuda_is_refused_in_one_line():
    import torch

    from trtspec.convert.eagle3.device import Placement, host_buffer, placement, resolve_device, to_device

    assert not torch.cuda.is_available()  # this machine; on a GPU machine auto picks cuda:<LOCAL_RANK>
    assert resolve_device("auto") == torch.device("cpu") == resolve_device("cpu")
    with pytest.raises(TrtSpecError, match="device is cuda but torch sees no CUDA device") as error:
        resolve_device("cuda")
    assert "\n" not in str(error.value) and "auto or cpu" in str(error.value)
    chosen = placement("auto", "float32")
    assert chosen == Placement(torch.device("cpu"), "float32") and chosen.describe() == "cpu float32"
    tensor = torch.ones(3)
    assert to_device(tensor, chosen.device) is tensor and not host_buffer((2,), torch.float32, chosen.device).is_pinned()


def test_training_code_never_names_the_cpu():
    """Tensors follow `placement.device`; `.cpu()` or a literal "cpu" device in these modules
    would pin a GPU run's data to the host (eagle3/device.py is the one place devices are named)."""
    training = ["stage.py", "batches.py", "data.py", "features.py", "prepare.py", "train.py", "store.py"]
    for name in training:
        text = (EAGLE3 / name).read_text()
        assert ".cpu()" not in text and not re.search(r"device\(\s*['\"]cpu", text), name


def test_phases_report_through_a_callback_and_the_cli_draws_tokens_per_second():
    from rich.console import Console

    from trtspec.cli.convert_cmd import Bars
    from trtspec.convert.progress import Phase

    events = []
    phase = Phase(events.append, "training", total=10, unit="steps")
    phase.advance(2, tokens=4096, info="loss 1.0")
    phase.set(5)
    assert [(e.completed, e.tokens, e.info) for e in events] == [(0, 0, ""), (2, 4096, "loss 1.0"), (5, 4096, "loss 1.0")]
    output = io.StringIO()
    with Bars(Console(file=output, width=160, force_terminal=False)) as bars:
        for event in events:
            bars(event)
    drawn = output.getvalue()
    assert "training" in drawn and "5/10" in drawn and "tok/s" in drawn and "loss 1.0" in drawn


def test_convert_line_names_the_device_and_processes(tiny_llama, in_tmp):
    from click.testing import CliRunner

    from trtspec.cli import main

    spec = write_spec(in_tmp, tiny_llama, speculative={"mode": "eagle3"})
    result = CliRunner().invoke(main, ["convert", "-c", str(spec), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "(EAGLE-3 on cpu " in result.output and ", 1 process)" in result.output
    refused = CliRunner().invoke(main, ["convert", "-c", str(spec), "--device", "cuda", "--dry-run"])
    assert refused.exit_code != 0 and "torch sees no CUDA device" in refused.output
