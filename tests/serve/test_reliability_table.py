"""docs/DEPLOY.md's Reliability table is the one scripts/reliability_table.py generates from the
reliability tests' docstrings: a new or changed test without an updated doc fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("reliability_table", ROOT / "scripts" / "reliability_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reliability_table_in_deploy_md_is_current():
    script = _script()
    doc = script.DOC.read_text()
    assert script.with_table(doc, script.render(script.rows())) == doc, \
        "docs/DEPLOY.md's Reliability table is stale: run python scripts/reliability_table.py --write"


def test_every_finding_of_issue_15_has_a_row():
    tests = {test.split("::")[1] for _, _, test in _script().rows()}
    findings = {
        "start depends on PATH": "test_server_starts_with_a_foreign_python_first_on_path",
        "missing system libpython": "test_missing_system_libpython_is_one_line_naming_the_package",
        "killed stub mid-request": "test_killed_stub_errors_in_flight_clients_and_the_server_restarts",
        "dead stub, restart never": "test_dead_stub_is_reported_dead_with_restart_never",
        "k8s liveness": "test_liveness_probe_catches_a_dead_stub_without_a_supervisor",
        "two deploys race / spec-relative stop": "test_two_deploys_on_the_same_ports_one_wins_and_stop_works_from_elsewhere",
        "10 MB prompt": "test_ten_megabyte_prompt_is_refused_by_its_byte_length",
        "temperature": "test_http_temperature_that_underflows_or_overflows_is_refused",
        "integer wrap": "test_http_integer_that_wraps_negative_is_refused",
        "unknown JSON key": "test_http_unknown_json_key_is_refused",
        "shared memory / admin APIs (HTTP)": "test_http_admin_apis_are_closed_to_every_header",
        "shared memory / admin APIs (gRPC)": "test_grpc_admin_apis_are_closed_to_every_header",
        "nested JSON, HTTP inference off": "test_nested_json_is_refused_when_http_inference_is_off",
        "nested JSON retest": "test_nested_json_crash_retested_against_the_bundled_triton",
        "shm leak": "test_stop_removes_shared_memory_after_everything_was_killed",
        "SIGINT during deploy": "test_sigint_during_deploy_stops_what_it_started",
        "repository swap": "test_interrupted_repository_swap_leaves_a_complete_repository",
    }
    missing = {finding: test for finding, test in findings.items() if test not in tests}
    assert not missing, missing
