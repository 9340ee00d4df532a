"""The spec is validated once, at the boundary: every bad file gives one line naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trtspec.errors import SpecError
from trtspec.spec.loading import load_spec
from trtspec.spec.schema import Spec, validate_spec
from trtspec.spec.template import render_template

# (yaml text, the field path the error must name, a fragment of the message)
MALFORMED = [
    ("model:\n  sorce: smollm2\n", "model.sorce", "unknown key"),
    ("speculativ:\n  mode: ngram\n", "speculativ", "unknown key"),
    ("speculative:\n  mode: warp\n", "speculative.mode", "must be one of"),
    ("speculative:\n  max_draft_len: 0\n", "speculative.max_draft_len", "greater than or equal to 1"),
    ("speculative:\n  max_draft_len: many\n", "speculative.max_draft_len", "valid integer"),
    ("build:\n  backend: tensorrt\n", "build.backend", "must be one of"),
    ("build:\n  max_input_len: 4096\n  max_seq_len: 2048\n", "build.max_input_len", "less than build.max_seq_len"),
    ("build:\n  tokens_per_block: 48\n", "build.tokens_per_block", "power of two"),
    ("build:\n  gpu: a100\n", "build.gpu", "must be one of"),
    ("speculative:\n  mode: eagle3\nbuild:\n  backend: trtllm-engine\n", "speculative.mode", "LLM-API backend"),
    ("speculative:\n  mode: draft-target\n", "speculative.draft", "needs a draft model"),
    ("speculative:\n  mode: ngram\n  tree: {topk: 2, depth: 2, num_draft_tokens: 4}\n", "speculative.tree",
     "grow from an EAGLE-3 head or a draft model"),
    ("speculative:\n  mode: ngram\n  draft_len_schedule: [[1, 2, 2, 4]]\n", "speculative.draft_len_schedule",
     "need mode eagle3 or draft-target"),
    ("speculative:\n  ngram_min: 4\n  ngram_max: 2\n", "speculative.ngram_min", "must not exceed"),
    ("serve:\n  http_port: 8001\n  grpc_port: 8001\n", "serve", "must differ"),
    ("serve:\n  http_port: 70000\n", "serve.http_port", "less than or equal to 65535"),
    ("bench:\n  concurrency: [1, 0]\n", "bench.concurrency", "positive integers"),
    ("quantization:\n  fp8: maybe\n", "quantization.fp8", "valid boolean"),
    ("build:\n  prepack: sometimes\n", "build.prepack", "valid boolean"),
    ("quantization:\n  fp8_kv_cache: true\n", "quantization.fp8_kv_cache", "cpu backend"),
    ("model:\n  dtype: float16\n", "model.dtype", "the cpu engine runs float32 or bfloat16"),
    ("build:\n  backend: trtllm-engine\nserve:\n  stream_interval: 4\n", "serve.stream_interval",
     "only the cpu backend's model gathers streamed tokens"),
    ("serve:\n  stream_interval: 0\n", "serve.stream_interval", "greater than or equal to 1"),
    ("- just\n- a list\n", "top level", "mapping"),
    ("model: [unclosed\n", "not valid YAML", "YAML"),
    ("speculative:\n  eagle3:\n    learning_rate: 2\n", "speculative.eagle3.learning_rate", "less than 1"),
    ("speculative:\n  max_draft_lenn: 5\n", "speculative.max_draft_lenn", "did you mean max_draft_len?"),
    ("build:\n  max_draft_len: 5\n", "build.max_draft_len",
     "did you mean speculative.max_draft_len or speculative.suffix.max_draft_len?"),
    ("speculative:\n  eagle3:\n    num_sample: 5\n", "speculative.eagle3.num_sample", "did you mean num_samples?"),
    ("speculative:\n  zzz: 1\n", "speculative.zzz", "speculative takes: mode, max_draft_len"),
    ("serve:\n  host: 'two words'\n", "serve.host", "not an IP address or a host name"),
    ("serve:\n  host: nowhere.invalid\n", "serve.host", "does not resolve"),
    ("build: {}\n\x00", "not valid YAML", "special characters are not allowed"),
]


@pytest.mark.parametrize("text,field,fragment", MALFORMED, ids=[m[1] for m in MALFORMED])
def test_malformed_spec_names_the_field(tmp_path, text, field, fragment):
    path = tmp_path / "trtspec.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    lines = str(caught.value).splitlines()
    assert any(field in line and fragment in line for line in lines), lines
    assert all("\n" not in line and line.strip() for line in lines)
    for line in lines:  # `problem (got value); fix`: nothing but the fix may follow what was given
        if "(got " in line:
            after = line[line.rindex("(got "):]
            assert after.endswith(")") or ")" in after and after[after.index(")") + 1:].startswith("; "), line


def test_draft_model_trees_are_taken_on_the_cpu_backend():
    """A draft model grows dynamic trees like the EAGLE-3 head, in the spec and in schedule rows."""
    spec = validate_spec({"speculative": {"mode": "draft-target", "draft": "smollm2",
                                          "tree": {"topk": 3, "depth": 4, "num_draft_tokens": 10},
                                          "draft_len_schedule": [[1, 3, 4, 10], [4, 2], [8, 0]]}})
    assert (spec.speculative.tree.topk, spec.speculative.tree.num_draft_tokens) == (3, 10)


def test_a_spec_file_in_utf16_is_one_problem(tmp_path):
    path = tmp_path / "trtspec.yaml"
    path.write_bytes("model:\n  source: smollm2\n".encode("utf-16"))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert caught.value.problems == [f"{path}: the spec file is not UTF-8 text (byte 0); save it as UTF-8 text"]


def test_loopback_is_told_apart_from_exposed_addresses():
    from trtspec.spec.checks import is_loopback

    assert [is_loopback(h) for h in ("127.0.0.1", "127.0.1.1", "::1", "localhost")] == [True] * 4
    assert [is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.5", "nowhere.invalid")] == [False] * 4
    assert validate_spec({"serve": {"host": "0.0.0.0"}}).serve.exposed
    assert not Spec().serve.exposed


def test_defaults_run_the_demo():
    spec = Spec()
    assert (spec.model.source, spec.speculative.mode, spec.build.backend) == ("smollm2", "ngram", "cpu")
    assert spec.serve.host == "127.0.0.1"
    assert spec.model.trust_remote_code is False


def test_every_field_has_a_docstring_and_a_default():
    from pydantic import BaseModel

    def walk(model_cls, prefix=""):
        for name, field in model_cls.model_fields.items():
            assert field.description, f"{prefix}{name} has no docstring"
            assert not field.is_required(), f"{prefix}{name} has no default"
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                walk(annotation, f"{prefix}{name}.")

    walk(Spec)


def test_template_round_trips_to_the_defaults(in_tmp):
    path = in_tmp / "trtspec.yaml"
    path.write_text(render_template())
    assert load_spec(path) == Spec()
    assert render_template().count("\n# ") > 5  # it is commented


def test_flags_override_the_file(tmp_path):
    path = tmp_path / "trtspec.yaml"
    path.write_text(yaml.safe_dump({"speculative": {"mode": "none", "max_draft_len": 3}}))
    spec = load_spec(path, {"speculative.mode": "eagle3", "build.backend": None})
    assert spec.speculative.mode == "eagle3"
    assert spec.speculative.max_draft_len == 3
    assert spec.build.backend == "cpu"


def test_override_is_validated_too(tmp_path):
    with pytest.raises(SpecError, match="speculative.max_draft_len"):
        load_spec(None, {"speculative.max_draft_len": 100})


def test_explicit_missing_file_is_an_error(tmp_path):
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec(tmp_path / "missing.yaml")


def test_several_problems_are_all_reported():
    with pytest.raises(SpecError) as caught:
        validate_spec({"model": {"bogus": 1}, "speculative": {"max_draft_len": 0}})
    assert len(caught.value.problems) == 2


def test_model_name_is_derived_from_the_source():
    assert Spec().model_name == "smollm2"
    assert validate_spec({"model": {"source": "/models/Llama-3.1-8B/"}}).model_name == "llama-3.1-8b"
    assert validate_spec({"model": {"source": "x/TinyStories.gguf"}}).model_name == "tinystories"


def test_paths_in_a_spec_file_resolve_against_its_directory(tmp_path, monkeypatch):
    """`-c other/dir/trtspec.yaml` from elsewhere: outputs (given or default) land beside the
    spec file, prompt files and existing source paths are found there, aliases, absolute paths
    and flags (relative to the current directory) are left alone."""
    other = tmp_path / "other" / "dir"
    (other / "models" / "tiny").mkdir(parents=True)
    (other / "trtspec.yaml").write_text(
        "model: {source: models/tiny}\nspeculative: {mode: draft-target, draft: smollm2}\n"
        "build: {output_dir: out/engines}\nbench: {prompts: prompts.jsonl}\n"
        f"serve: {{repository: {tmp_path / 'abs-repo'}}}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    spec = load_spec("../other/dir/trtspec.yaml", overrides={"build.output_dir": "mine"})
    base = Path("../other/dir")
    assert Path(spec.workdir) == base / "work"                       # default output
    assert Path(spec.model.source) == base / "models" / "tiny"       # existing source path
    assert spec.speculative.draft == "smollm2"                       # an alias
    assert Path(spec.bench.prompts) == base / "prompts.jsonl"
    assert spec.serve.repository == str(tmp_path / "abs-repo")       # absolute
    assert spec.build.output_dir == "mine"                           # a flag
    monkeypatch.chdir(other)
    assert load_spec("trtspec.yaml").workdir == "work"               # the spec's own directory: unchanged
