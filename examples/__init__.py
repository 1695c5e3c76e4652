"""Worked examples of extending the harness from outside the package (README, "Adding a width
rule"): arm files name these classes as ``module:Class``."""
