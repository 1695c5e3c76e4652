"""Chat templates: a conversation rendered with the model's own Jinja template (as llama-server
does with ``--jinja``)."""

from __future__ import annotations

import datetime
import json
from typing import Any

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(ValueError):
    pass


def _raise(msg: str) -> None:
    raise ChatTemplateError(msg)


def render(
    template: str,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
) -> str:
    """Render ``messages`` (and ``tools``) with a chat template."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = lambda v, indent=None, **_: json.dumps(v, indent=indent,
                                                                   ensure_ascii=False)
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    try:
        return env.from_string(template).render(
            messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
            bos_token=bos_token, eos_token=eos_token,
        )
    except TemplateError as e:
        raise ChatTemplateError(f"the model's chat template failed: {e}") from None


def default_system_prompt(template: str, **special: str) -> str | None:
    """The system prompt ``template`` renders when a conversation has none (SmolLM2's and Qwen's
    templates insert their own), or None when it renders none: the text it puts where a given
    system message's content would go (found by rendering one with a marker)."""
    mark, user = "\u0000system\u0000", "\u0000user\u0000"
    given = render(template, [{"role": "system", "content": mark},
                              {"role": "user", "content": user}], **special)
    plain = render(template, [{"role": "user", "content": user}], **special)
    if mark not in given:
        return None
    head, _, rest = given.partition(mark)
    tail = rest.partition(user)[0]
    if not plain.startswith(head) or not tail:
        return None
    body = plain[len(head):]
    return body.partition(tail)[0] if tail in body else None
