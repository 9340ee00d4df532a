"""NVIDIA Dynamo in front of trtspec engines: the worker (a cpu engine behind Dynamo's frontend), its KV
events and vLLM-named metrics, the local launcher (`deploy --target dynamo`) and the graph written for
a cluster (`deploy --target dynamo-k8s`). docs/DEPLOY.md, "More than one server"."""
