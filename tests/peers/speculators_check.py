"""Run by .venv-speculators/bin/python (not by pytest): load a head as speculators' users load it.

    python speculators_check.py HEAD_DIR   ->  one JSON line on stdout

SpeculatorModelConfig.from_pretrained (speculators' pydantic config, which resolves the verifier)
and SpeculatorModel.from_pretrained (the registered model class): the class name, the config's
verifier and version, and per state-dict tensor its dtype, shape, NaN count and a sum, so the test
can compare them with the files trtspec wrote. Imports nothing from trtspec: this venv has none.
"""

from __future__ import annotations

import json
import sys


def main(directory: str) -> dict:
    from importlib.metadata import version

    import torch
    from speculators import SpeculatorModel, SpeculatorModelConfig

    config = SpeculatorModelConfig.from_pretrained(directory)
    model = SpeculatorModel.from_pretrained(directory, config=config)
    tensors = {}
    for name, tensor in model.state_dict().items():
        values = tensor.detach().to(torch.float64) if tensor.is_floating_point() else tensor.detach().to(torch.int64)
        tensors[name] = {"dtype": str(tensor.dtype).removeprefix("torch."), "shape": list(tensor.shape),
                         "nan": int(torch.isnan(values).sum()) if tensor.is_floating_point() else 0,
                         "sum": float(values.sum()), "abs_sum": float(values.abs().sum())}
    verifier = config.speculators_config.verifier
    return {"speculators": version("speculators"), "class": type(model).__name__,
            "config_class": type(config).__name__, "verifier": verifier.name_or_path,
            "verifier_architectures": list(verifier.architectures or []),
            "layer_ids": getattr(config, "eagle_aux_hidden_state_layer_ids", None), "tensors": tensors}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
