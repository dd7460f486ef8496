"""Whether a model takes images: a server's refusal of `image_url` parts, and models known to be text-only.

A text-only model's server refuses a request holding an image part, each in its words (`wire.wording`, kinds
`images_refused` and `image_parts_unnamed`, with the servers that say them). Such a refusal is final
(`ImagesRefused`, saying it is remembered and how to forget it), never adapted or retried; the client remembers it
for the base URL and model (`wire.facts`, `images: false`), and a model named in `TEXT_ONLY_MODELS` is known
text-only in advance. What is known only decides what is offered: the images tools return go as their names. An
image the person attaches is always sent (the server may have changed: llama-server restarted with `--mmproj`),
and a request with images that is accepted makes the model one that takes images (`images: true`, which also
outranks its name). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ..errors import ProviderError
from . import wording

__all__ = ["TEXT_ONLY_MODELS", "ImagesRefused", "holds_images", "known_text_only",
           "refuses_images"]

TEXT_ONLY_MODELS = re.compile(r"(^|/)(gpt-3\.5|o1-mini|o3-mini|deepseek-(chat|reasoner|coder)|smollm2?-)",
                              re.IGNORECASE)
"""Model names known to take no images (their providers' model pages); other names are tried."""


class ImagesRefused(ProviderError):
    """The model takes no images: its server refused the request's image parts, or it is known text-only; exit 1.

    Attributes:
        model: the model's name.
    """

    def __init__(self, model: str, said: str | None = None, *, status: int | None = None,
                 remembered: str | None = None) -> None:
        why = f"the server said: {said}" if said else "known from an earlier refusal or its name"
        kept = f"; {remembered}" if remembered else ""
        super().__init__(f"the model {model} takes no images ({why}){kept}; use a vision model (--model), or leave "
                         "the image out", status=status)
        self.model = model


def holds_images(messages: Iterable[Any]) -> bool:
    """Whether any message's content holds an `image_url` part."""
    return any(isinstance(m, dict) and isinstance(m.get("content"), list)
               and any(isinstance(p, dict) and p.get("type") == "image_url" for p in m["content"])
               for m in messages)


def refuses_images(status: int, text: str, messages: Iterable[Any]) -> bool:
    """Whether a refusal (`status`, its body `text`) is one of the image parts of a request holding `messages`."""
    if status not in (400, 415, 422, 500) or not holds_images(messages):
        return False
    return wording.said("images_refused", text) or (
        wording.said("image_parts_unnamed", text) and "image" in text.lower())


def known_text_only(model: str, facts: dict[str, Any]) -> bool:
    """Whether the model is known to take no images: learned (`facts["images"] is False`) or by its name, unless
    a request with images was accepted since (`facts["images"] is True`)."""
    learned = facts.get("images")
    return learned is False or (learned is not True and TEXT_ONLY_MODELS.search(model) is not None)
