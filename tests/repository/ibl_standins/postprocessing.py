"""trtspec's minimal postprocessing for the CPU flow test, written to the contract's names.

Loads only under a config that declares what upstream's postprocessing reads (require_contract);
accepts exactly TOKENS_BATCH and SEQUENCE_LENGTH, as upstream's execute does, and sends OUTPUT.
"""

import standin_common  # noqa: F401, I001 (first: it puts the venv's site-packages on the stub's sys.path)
import json

import numpy as np
import triton_python_backend_utils as pb_utils
from standin_common import ids_to_text, require_contract


class TritonPythonModel:

    def initialize(self, args):
        config = json.loads(args["model_config"])
        require_contract(config, "postprocessing")
        self.dtype = pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(config, "OUTPUT")["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            names = {tensor.name() for tensor in request.inputs()}
            if names - {"TOKENS_BATCH", "SEQUENCE_LENGTH"}:
                raise ValueError(f"unknown inputs {sorted(names)}")        # upstream raises too
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()       # [batch, beam, len]
            lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy()   # [batch, beam]
            texts = [ids_to_text(tokens[0][beam][:lengths[0][beam]]).encode("utf-8") for beam in range(tokens.shape[1])]
            responses.append(pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("OUTPUT", np.array([texts]).astype(self.dtype))]))
        return responses
