"""Shared text cues: small regexes that more than one layer reads off a question.

One definition each, so the router's features and the planners' rules agree on what, say, a yes/no
question is.
"""

from __future__ import annotations

import re

# A question opened by an auxiliary verb ("Is ...", "Were A and B ...", "Could ...") expects yes or no.
YES_NO = re.compile(r"^\s*(?:is|are|was|were|do|does|did|can|could|has|have|had|will|would|should)\b", re.I)

__all__ = ["YES_NO"]
