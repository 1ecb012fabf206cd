"""Benchmarks: measured side by side in one run, never asserted against a time limit."""
