"""The convert report's warning for a head whose acceptance cannot pay, and its machine line."""

from __future__ import annotations

from trtspec.artifacts import StageResult
from trtspec.cli.convert_cmd import _print_results
from trtspec.convert.reports import LOW_ACCEPTANCE_LENGTH, SLOWER_THAN_PLAIN, low_acceptance_warning


def test_warning_below_the_threshold_only():
    assert low_acceptance_warning({"mean_acceptance_length": LOW_ACCEPTANCE_LENGTH}) is None
    assert low_acceptance_warning({"mean_acceptance_length": 1.62}) is None
    line = low_acceptance_warning({"mean_acceptance_length": 1.18})
    assert line.startswith("mean acceptance length 1.18 is below 1.3") and "\n" not in line
    assert "max_minutes" in line and "num_samples" in line


def _speed(speculative: float, plain: float) -> dict:
    return {"concurrency": 1, "draft": "chain of 4", "speculative_tokens_per_s": speculative,
            "plain_tokens_per_s": plain, "speedup": round(speculative / plain, 3)}


def test_a_measured_speed_decides_over_the_acceptance_length():
    """Whether a head pays depends on the machine: the speed measured here decides when there is one."""
    slow = low_acceptance_warning({"mean_acceptance_length": 1.44, "speed": _speed(9.6, 11.3)})
    assert slow.startswith("decoding with this head ran 0.85x the speed of decoding without it on this machine")
    assert "9.6 vs 11.3 tokens/s, chain of 4, mean acceptance length 1.44" in slow and "\n" not in slow
    assert "max_minutes" in slow and "mode ngram" in slow
    # a low acceptance length that still pays here: no warning
    assert low_acceptance_warning({"mean_acceptance_length": 1.25, "speed": _speed(12.0, 11.0)}) is None
    edge = 11.0 * SLOWER_THAN_PLAIN
    assert low_acceptance_warning({"mean_acceptance_length": 1.5, "speed": _speed(edge, 11.0)}) is None
    assert low_acceptance_warning({"mean_acceptance_length": 1.5, "speed": _speed(edge - 0.1, 11.0)}) is not None


def test_results_print_the_machine_and_the_warning(capsys, tmp_path):
    report = {"acceptance": {"mean_acceptance_length": 1.18, "max_draft_len": 4, "acceptance_per_position": [0.2],
                             "method": "trtspec.runtime", "speed": _speed(9.6, 11.3)},
              "training": {"steps": 61, "seconds": 900, "dtype": "float32", "device": "cpu", "processes": 1,
                           "tokens_per_s": 82.0,
                           "machine": {"cpu": "AMD EPYC", "isa": "AVX2", "threads": 2, "cores": 2}},
              "warning": low_acceptance_warning({"mean_acceptance_length": 1.18, "speed": _speed(9.6, 11.3)})}
    _print_results([StageResult("eagle3", tmp_path, "written", None, report)], None)
    out, err = capsys.readouterr()
    assert "float32 on cpu (AMD EPYC, AVX2, 2 threads on 2 cores), 1 process(es), 82.0 tokens/s" in out
    assert "on this machine, concurrency 1, chain of 4: 9.6 tokens/s with the head, 11.3 without (0.85x)" in out
    assert err.strip() == f"warning: {report['warning']}"
