"""The AdaSpark scheduler (§3), one module per mechanism.

- ``config``: Table 14's constants, loaded from ``conf/scheduler/adaspark.yaml``;
- ``features``: what Eq. (6) reads about a round's drafter candidates (§3.3; the candidates
  themselves are ``adaspark.decoding.candidates.CandidateSet``, §2.2);
- ``ngram``: the n-gram index over the request's text and its chains (§3.3);
- ``acceptance``: Eq. (6), the head-based estimate and the guard (§3.3);
- ``cost_law``, ``width_table``: the per-class context law and the learned width table (§3.2);
- ``chooser``: Eq. (7), rho, the gains and the hysteresis (§3.4);
- ``rule``: the ``adaspark`` width rule, a thin lifecycle over these (Algorithm 1 lines 4-18);
- ``records``, ``store``: per-request and per-round records, the persisted store;
- ``simulator``: a seeded environment that plays the engine's part.
"""
