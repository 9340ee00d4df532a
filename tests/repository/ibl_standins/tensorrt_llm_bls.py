"""trtspec's minimal BLS for the CPU flow test: upstream's decoder calls, by the contract's names.

Not upstream's code: it sends preprocessing, tensorrt_llm(_draft) and postprocessing the names the
contract says upstream's lib/triton_decoder.py sends, and asks each for every output that decoder
asks for (`requested_output_names`), so Triton refuses the call if a filled config lacks one (the
"unexpected inference output" failure). return_context_logits and return_generation_logits go
with every tensorrt_llm call, as upstream's do. With num_draft_tokens > 0 it runs a greedy
draft/verify loop through tensorrt_llm_draft and tensorrt_llm.
"""

import standin_common  # noqa: F401, I001 (first: it puts the venv's site-packages on the stub's sys.path)
import json

import numpy as np
import triton_python_backend_utils as pb_utils
from standin_common import reads, require_contract

# preprocessing output -> tensorrt_llm input (upstream's _get_preproc_response + _get_tensors_from_preproc)
PRE_TO_LLM = {"INPUT_ID": "input_ids", "REQUEST_INPUT_LEN": "input_lengths", "BAD_WORDS_IDS": "bad_words_list",
              "STOP_WORDS_IDS": "stop_words_list", "EMBEDDING_BIAS": "embedding_bias", "OUT_PAD_ID": "pad_id",
              "OUT_END_ID": "end_id", "DECODER_INPUT_ID": "decoder_input_ids"}


def _asked_by_decoder(entries):
    return any("BLS decoder" in entry["how"] for entry in entries)


def _exec(request):
    response = request.exec()
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return {tensor.name(): tensor.as_numpy() for tensor in response.output_tensors()}


class TritonPythonModel:

    def initialize(self, args):
        config = json.loads(args["model_config"])
        require_contract(config, "tensorrt_llm_bls")
        params = config["parameters"]
        self.llm = params["tensorrt_llm_model_name"]["string_value"] or "tensorrt_llm"
        self.draft = params["tensorrt_llm_draft_model_name"]["string_value"] or None
        self.pre_outputs = [n for n, e in reads("preprocessing")["outputs"].items() if _asked_by_decoder(e)]
        self.llm_outputs = list(reads("tensorrt_llm")["outputs"])

    def _preprocess(self, request):
        inputs = [pb_utils.Tensor("QUERY", pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()),
                  pb_utils.Tensor("REQUEST_OUTPUT_LEN", pb_utils.get_input_tensor_by_name(request, "max_tokens").as_numpy())]
        return _exec(pb_utils.InferenceRequest(model_name="preprocessing", inputs=inputs,
                                               requested_output_names=self.pre_outputs))

    def _generate(self, model, pre, context, output_len, drafts=None):
        inputs = [pb_utils.Tensor(PRE_TO_LLM[name], value) for name, value in pre.items() if name in PRE_TO_LLM
                  and name not in ("INPUT_ID", "REQUEST_INPUT_LEN")]
        inputs += [pb_utils.Tensor("input_ids", np.array([context], dtype=np.int32)),
                   pb_utils.Tensor("input_lengths", np.array([[len(context)]], dtype=np.int32)),
                   pb_utils.Tensor("request_output_len", np.array([[output_len]], dtype=np.int32)),
                   pb_utils.Tensor("return_context_logits", np.array([[False]])),
                   pb_utils.Tensor("return_generation_logits", np.array([[False]]))]
        if drafts:
            inputs.append(pb_utils.Tensor("draft_input_ids", np.array([drafts], dtype=np.int32)))
        out = _exec(pb_utils.InferenceRequest(model_name=model, inputs=inputs, requested_output_names=self.llm_outputs))
        tokens = [int(t) for t in out["output_ids"][0][0][:out["sequence_length"][0][0]]]
        # the engine repeats the prompt unless exclude_input_in_output (draft-target keeps it)
        return tokens[len(context):] if tokens[:len(context)] == context else tokens

    def _decode(self, request):
        # 1. tokens, 2. draft/verify or one generation call, 3. text
        pre = self._preprocess(request)
        prompt = [int(t) for t in pre["INPUT_ID"][0]]
        budget = int(pb_utils.get_input_tensor_by_name(request, "max_tokens").as_numpy().ravel()[0])
        draft_len = pb_utils.get_input_tensor_by_name(request, "num_draft_tokens")
        draft_len = int(draft_len.as_numpy().ravel()[0]) if draft_len is not None else 0
        context = list(prompt)
        while len(context) - len(prompt) < budget:
            remaining = budget - (len(context) - len(prompt))
            k = min(draft_len, remaining - 1) if self.draft else 0
            drafts = self._generate(self.draft, pre, context, k) if k > 0 else None
            new = self._generate(self.llm, pre, context, len(drafts) + 1 if drafts else remaining, drafts)
            if not new:
                break
            context += new[:remaining]
        post = _exec(pb_utils.InferenceRequest(
            model_name="postprocessing", requested_output_names=["OUTPUT"],
            inputs=[pb_utils.Tensor("TOKENS_BATCH", np.array([[context[len(prompt):]]], dtype=np.int32)),
                    pb_utils.Tensor("SEQUENCE_LENGTH", np.array([[len(context) - len(prompt)]], dtype=np.int32))]))
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("text_output", post["OUTPUT"])])

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                responses.append(self._decode(request))
            except pb_utils.TritonModelException as error:
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(error))))
        return responses
