"""Drafters: what proposes a round's block of ``B`` positions with ``K`` candidates each (§2.1)."""
