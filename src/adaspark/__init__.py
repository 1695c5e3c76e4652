"""AdaSpark reproduction harness: DSpark-style tree verification on llama.cpp, scheduled online.

The package follows the paper (shared/paper/AdaSpark-paper.txt) one concept per module:
``tree`` (§3.1, Prop. 1), ``engine`` (§2.2, §3.5), ``drafter`` (§2.1), ``width_rules`` and the
scheduler modules (§3.2-§3.4), ``decode`` (the round loop of Algorithm 1).
"""

__version__ = "0.1.0"
