"""trtspec's minimal preprocessing for the CPU flow test, written to the contract's names.

Loads only when its filled config declares every parameter, input and output the contract says
upstream's preprocessing reads (require_contract). Tokenizes one byte per token and sends every
output upstream's execute sends, with the data type its config declares.
"""

import standin_common  # noqa: F401, I001 (first: it puts the venv's site-packages on the stub's sys.path)
import json

import numpy as np
import triton_python_backend_utils as pb_utils
from standin_common import require_contract, text_to_ids

END_ID, PAD_ID = 2, 0


class TritonPythonModel:

    def initialize(self, args):
        self.config = json.loads(args["model_config"])
        self.reads = require_contract(self.config, "preprocessing")
        self.dtypes = {o["name"]: pb_utils.triton_string_to_numpy(o["data_type"]) for o in self.config["output"]}

    def _tensor(self, name, value):
        return pb_utils.Tensor(name, np.array(value, dtype=self.dtypes[name]))

    def execute(self, requests):
        responses = []
        for request in requests:
            query = pb_utils.get_input_tensor_by_name(request, "QUERY").as_numpy().ravel()[0]
            ids = text_to_ids(query.decode("utf-8") if isinstance(query, bytes) else str(query))
            output_len = pb_utils.get_input_tensor_by_name(request, "REQUEST_OUTPUT_LEN").as_numpy()
            end = pb_utils.get_input_tensor_by_name(request, "END_ID")
            pad = pb_utils.get_input_tensor_by_name(request, "PAD_ID")
            outputs = {
                "INPUT_ID": [ids], "REQUEST_INPUT_LEN": [[len(ids)]],
                "DECODER_INPUT_ID": [[PAD_ID]], "REQUEST_DECODER_INPUT_LEN": [[1]],
                "REQUEST_OUTPUT_LEN": output_len.reshape(1, -1),
                "BAD_WORDS_IDS": [[[0], [-1]]], "STOP_WORDS_IDS": [[[0], [-1]]],   # no words: [ids, offsets]
                "EMBEDDING_BIAS": np.zeros((1, 0)),
                "OUT_END_ID": end.as_numpy().reshape(1, 1) if end is not None else [[END_ID]],
                "OUT_PAD_ID": pad.as_numpy().reshape(1, 1) if pad is not None else [[PAD_ID]],
            }
            sent = [name for name in self.reads["outputs"] if name in outputs]
            responses.append(pb_utils.InferenceResponse(output_tensors=[self._tensor(n, outputs[n]) for n in sent]))
        return responses
