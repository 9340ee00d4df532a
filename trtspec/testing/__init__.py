"""Builders of tiny, seeded, real models for tests and examples (no downloads, no mocks)."""
