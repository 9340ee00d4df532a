"""The convert report's warning for a head whose acceptance cannot pay, and its machine line."""

from __future__ import annotations

from trtspec.cli.convert_cmd import _print_results
from trtspec.convert.reports import LOW_ACCEPTANCE_LENGTH, low_acceptance_warning
from trtspec.convert.target import StageResult


def test_warning_below_the_threshold_only():
    assert low_acceptance_warning({"mean_acceptance_length": LOW_ACCEPTANCE_LENGTH}) is None
    assert low_acceptance_warning({"mean_acceptance_length": 1.62}) is None
    line = low_acceptance_warning({"mean_acceptance_length": 1.18})
    assert line.startswith("mean acceptance length 1.18 is below 1.3") and "\n" not in line
    assert "max_minutes" in line and "num_samples" in line


def test_results_print_the_machine_and_the_warning(capsys, tmp_path):
    report = {"acceptance": {"mean_acceptance_length": 1.18, "max_draft_len": 4, "acceptance_per_position": [0.2],
                             "method": "trtspec.runtime"},
              "training": {"steps": 61, "seconds": 900, "dtype": "float32", "device": "cpu", "processes": 1,
                           "tokens_per_s": 82.0,
                           "machine": {"cpu": "AMD EPYC", "isa": "AVX2", "threads": 2, "cores": 2}},
              "warning": low_acceptance_warning({"mean_acceptance_length": 1.18})}
    _print_results([StageResult("eagle3", tmp_path, "written", None, report)], None)
    out, err = capsys.readouterr()
    assert "float32 on cpu (AMD EPYC, AVX2, 2 threads on 2 cores), 1 process(es), 82.0 tokens/s" in out
    assert err.strip() == f"warning: {report['warning']}"
