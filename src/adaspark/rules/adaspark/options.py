"""The AdaSpark rule's keywords in an arm file (``width_rule: adaspark``, §3): learned,
kernel-class or pinned widths (a pinned width needs the anchor and at least one candidate), the
acceptance estimate that prices a tree, n-gram fill, the width-1 switch, the rate rule, the head
offset, the scheduler's constants (a file of ``conf/scheduler/``; null: the composed
``scheduler`` group) with an arm's own ``constants``, and where it keeps its store and round
log. Checked once where the arm is read (:func:`adaspark.schema.check_arm`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from adaspark.checks import spec
from adaspark.config import ConfigError
from adaspark.decoding.tree import MAX_WIDTH


@dataclass(frozen=True)
class AdaSparkOptions:
    """``width_rule: adaspark``'s keywords; each default is the rule's."""

    width: int | str = spec(min=2, max=MAX_WIDTH, choices=("learned", "classes"),
                            default="learned")
    acceptance: Literal["fitted", "head"] = "fitted"
    ngram: bool = True
    offer_width1: bool = False
    rate_rule: Literal["long_run", "ratio"] = "long_run"
    head_offset: bool = True
    scheduler: str | dict[str, Any] | None = None
    constants: dict[str, Any] | None = None
    store: str | None = None
    log_dir: str | None = None

    def check(self, where: str) -> None:
        """What one key's range cannot say: the width-1 switch needs a chooser."""
        if isinstance(self.width, int) and self.offer_width1:
            raise ConfigError(f"{where}.offer_width1=true needs learned or class widths, not "
                              f"the pinned {where}.width={self.width}")
