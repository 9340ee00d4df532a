"""Data only: containers.json and trtllm-<version>.json (read by trtspec.builders.contracts).

A package so that `pip install .` ships the JSON files (package-data "*.json")."""
