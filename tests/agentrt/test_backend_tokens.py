"""tiktoken offline from bpe-openai files (no network), and the estimate margin the openai backend reserves."""

from __future__ import annotations

import pytest

from agentrt.core import tokens
from agentrt.core.errors import ConfigError


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken"))
    tokens.get_encoding.cache_clear()
    yield tmp_path / "tiktoken"
    tokens.get_encoding.cache_clear()


def test_encodings_load_offline_with_the_usual_ids(fresh_cache):
    cl100k, o200k = tokens.get_encoding("cl100k_base"), tokens.get_encoding("o200k_base")
    assert cl100k.encode("hello world") == [15339, 1917]
    assert o200k.encode("hello world") == [24912, 2375]
    assert o200k.decode(o200k.encode("Příliš žluťoučký kůň")) == "Příliš žluťoučký kůň"
    assert len(list(fresh_cache.iterdir())) == 2  # placed where tiktoken's own cache looks


def test_chat_estimate_and_margin(fresh_cache):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello world"}]
    n = tokens.count_chat_tokens(msgs)
    assert n > 4 and tokens.estimate_margin(n) >= 32 + n // 2
    with pytest.raises(ConfigError, match="unknown tiktoken encoding"):
        tokens.get_encoding("p50k_base")
