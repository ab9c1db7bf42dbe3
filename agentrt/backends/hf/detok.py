"""Incremental detokenization for streaming: the new text of a row as its tokens arrive.

Decoding one token at a time is wrong for byte-level BPE and SentencePiece: a character can span
several tokens (an emoji, CJK) and a token's leading space depends on what precedes it. ``TextStream``
decodes a short window of recent tokens instead (the method of vLLM and TGI): the text a new token
adds is the window decoded with it minus the window decoded without it, and it is held back while it
ends in an incomplete character (U+FFFD). Text that could be the start of a stop string is held back
too, so nothing is sent that the stop string later cuts. ``finish`` sends the rest of the final text,
so the pieces always concatenate to the completion's text.
"""

from __future__ import annotations

from typing import Any


class TextStream:
    """One row's text as it streams: ``push`` each new token id, ``finish`` with the final text."""

    __slots__ = ("tokenizer", "stop", "ids", "prefix", "read", "text", "sent")

    def __init__(self, tokenizer: Any, stop: list[str] | None = None) -> None:
        self.tokenizer = tokenizer
        self.stop = [s for s in stop or [] if s]
        self.ids: list[int] = []
        self.prefix = 0  # start of the decoding window (tokens before it are settled text)
        self.read = 0  # tokens whose text is in self.text
        self.text = ""  # the decoded text so far (complete characters only)
        self.sent = 0  # characters of self.text already handed out

    def push(self, token_id: int) -> str:
        """Add a token; return the text that may be shown now ('' while held back)."""
        self.ids.append(token_id)
        decode = self.tokenizer.decode
        before = decode(self.ids[self.prefix:self.read], skip_special_tokens=True)
        after = decode(self.ids[self.prefix:], skip_special_tokens=True)
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self.text += after[len(before):]
            self.prefix, self.read = self.read, len(self.ids)
        end = len(self.text) - _held_for_stop(self.text, self.sent, self.stop)
        if end <= self.sent:
            return ""
        piece, self.sent = self.text[self.sent:end], end
        return piece

    def finish(self, final: str) -> str:
        """The rest of ``final`` (the completion's text, cut at its stop string) not yet sent."""
        piece = final[self.sent:]
        self.sent = len(final)
        return piece


def _held_for_stop(text: str, sent: int, stops: list[str]) -> int:
    """Characters at the end of ``text`` to hold back: from a stop string on, or the start of one.
    Only the unsent part can hold one (what was sent held no start of a stop string)."""
    held = 0
    for s in stops:
        at = text.find(s, sent)
        if at >= 0:
            held = max(held, len(text) - at)
            continue
        for k in range(min(len(s) - 1, len(text)), held, -1):
            if text.endswith(s[:k]):
                held = k
                break
    return held
