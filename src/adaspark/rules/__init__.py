"""Width rules: what a round verifies (Algorithm 1, lines 5-12).

- ``base``: the interface every rule implements (:class:`~adaspark.rules.base.WidthRule`), the
  round records it exchanges with the loop, and the registry of rules by config name;
- ``fixed``: the fixed rules (autoregressive, chain, pinned width);
- ``adaspark``: the AdaSpark scheduler (§3), one module per mechanism;
- ``arms``: an arm's config (``conf/arm/``) to its drafter and rule.
"""
