"""The decoding engine: one speculative round after another on llama.cpp (§2).

- ``tree``: verify trees, best-first order and the accepted path (§2.2, Proposition 1);
- ``engine``: the target and draft models over llama.cpp's C API (prefill, one ``llama_decode``
  per tree verify, commit);
- ``candidates``: one round's candidate set and the head-based estimate (§2.2, §3.3);
- ``drafter``: the drafters that propose a block (§2.1);
- ``loop``: the speculative loop that runs any width rule (Algorithm 1's outer loop);
- ``generate``: the one-prompt command (``adaspark generate``).
"""
