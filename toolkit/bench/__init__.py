"""Benchmarks behind `kvtk bench`. Each prints its numbers (and JSON with --json); none is a timed test."""
