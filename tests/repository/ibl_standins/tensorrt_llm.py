"""Stand-in for the C++ `tensorrtllm` model (tensorrt_llm and tensorrt_llm_draft) on the CPU Triton.

It loads under the config trtspec's fill lists make of upstream's template (only `backend` is
`python` instead of `tensorrtllm`), so Triton refuses any input a caller sends or output a caller
asks for that the config does not declare. It answers like a greedy engine whose text is fixed:
the next token continues FIXED (" Paris.") from the longest suffix of the context that begins it,
one byte per token. The draft model's text differs at one byte, so the target rejects part of
each draft. With draft_input_ids it verifies them as `draft_tokens_external` engines do: the
accepted prefix plus one token of its own. exclude_input_in_output (parameter, or the request's
input) decides whether output_ids repeats the prompt, as in the C++ backend.
"""

import standin_common  # noqa: F401, I001 (first: it puts the venv's site-packages on the stub's sys.path)
import json

import numpy as np
import triton_python_backend_utils as pb_utils
from standin_common import require_contract

FIXED = list(b" Paris.")
DRAFT_FIXED = list(b" Parix.")
END_ID = 2


def _scalar(request, name, default=None):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().ravel()[0]


class TritonPythonModel:

    def initialize(self, args):
        config = json.loads(args["model_config"])
        require_contract(config, "tensorrt_llm")
        self.fixed = DRAFT_FIXED if args["model_name"].endswith("_draft") else FIXED
        self.exclude = config["parameters"]["exclude_input_in_output"]["string_value"].lower() == "true"
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)

    def _next(self, context):
        for k in range(min(len(self.fixed), len(context)), 0, -1):
            if list(context[-k:]) == self.fixed[:k]:
                return self.fixed[k] if k < len(self.fixed) else END_ID
        return self.fixed[0]

    def _generate(self, request):
        # 1. the prompt and the budget
        prompt = [int(t) for t in pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy().ravel()]
        budget = int(_scalar(request, "request_output_len", 1))
        drafts = pb_utils.get_input_tensor_by_name(request, "draft_input_ids")
        # 2. greedy continuation, or verification of the draft (accepted prefix + one own token)
        new = []
        if drafts is not None:
            for token in drafts.as_numpy().ravel():
                own = self._next(prompt + new)
                if own != int(token) or len(new) >= budget - 1:
                    break
                new.append(own)
        while len(new) < budget and (not new or new[-1] != END_ID):
            new.append(self._next(prompt + new))
        new = [t for t in new if t != END_ID]
        exclude = bool(_scalar(request, "exclude_input_in_output", self.exclude))
        return prompt, new, exclude

    def _response(self, tokens):
        ids = np.array([[tokens]], dtype=np.int32)                   # [batch, beam, length]
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("output_ids", ids),
            pb_utils.Tensor("sequence_length", np.array([[len(tokens)]], dtype=np.int32))])

    def execute(self, requests):
        responses = []
        for request in requests:
            if bool(_scalar(request, "stop", False)):
                responses.append(pb_utils.InferenceResponse(output_tensors=[]))
                continue
            prompt, new, exclude = self._generate(request)
            if self.decoupled:                                        # streaming: new tokens one by one
                sender = request.get_response_sender()
                for token in new:
                    sender.send(self._response([token]))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                responses.append(self._response(new if exclude else prompt + new))
        return None if self.decoupled else responses
