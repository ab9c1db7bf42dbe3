"""A lean tokenizer for the hf backend: the folder's ``tokenizer.json`` through ``tokenizers`` and its chat template
through jinja2, as transformers' fast tokenizer does them, without importing transformers (~1-2 s of start-up).

``LeanTokenizer`` answers what the backend asks on every request: ``tokenizer(text, add_special_tokens=False)
.input_ids``, ``decode(ids, skip_special_tokens=...)``, ``apply_chat_template(messages, tokenize=False, ...)``,
``chat_template``, ``eos_token_id``, ``pad_token_id``. Anything else (other arguments, other attributes, xgrammar's
``TokenizerInfo.from_huggingface``) goes to transformers' own tokenizer for the folder, ``hf``, loaded on first
use. ``lean_tokenizer`` returns None for folders it cannot answer exactly for (no ``tokenizer.json``, a template
with ``{% generation %}``, tokenization-space clean-up), and the runner then loads transformers' tokenizer.
"""

from __future__ import annotations

import json
import re
from copy import deepcopy
from pathlib import Path
from typing import Any

_SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "  # transformers' marker for continue_final_message
_LONG = 4096  # characters (encode) or ids (decode) above which the GIL-free batch call is used
# tokenizer classes whose transformers tokenizer is the folder's tokenizer.json as it is, or (_QWEN2) its
# vocabulary and merges in the class's own pipeline, rebuilt in ``_qwen2_pipeline``
_QWEN2 = ("Qwen2Tokenizer", "Qwen2TokenizerFast")
_PLAIN_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast", "GPT2Tokenizer", "GPT2TokenizerFast", *_QWEN2, None)
# transformers' Qwen2Tokenizer pre-tokenizing regex (models/qwen2/tokenization_qwen2.py)
_QWEN2_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
                r"""\s*[\r\n]+|\s+(?!\S)|\s+""")


class _Encoding:
    __slots__ = ("input_ids",)

    def __init__(self, input_ids: list[int]) -> None:
        self.input_ids = input_ids

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


class LeanTokenizer:
    """transformers' fast tokenizer for the common calls, without transformers (see the module docstring)."""

    def __init__(self, path: Path, config: dict[str, Any], chat_template: str | None) -> None:
        from tokenizers import Tokenizer

        self.path = path
        self._tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        if config.get("tokenizer_class") in _QWEN2:
            _qwen2_pipeline(self._tok, bool(config.get("add_prefix_space")))
        self.chat_template = chat_template
        self.special_tokens_map = {k: _content(config[k]) for k in _SPECIAL if config.get(k) is not None}
        for k in _SPECIAL:
            token = self.special_tokens_map.get(k)
            setattr(self, k, token)
            setattr(self, f"{k}_id", self._tok.token_to_id(token) if token is not None else None)
        self._template = None
        self._hf = None

    @property
    def hf(self) -> Any:
        """transformers' own tokenizer for this folder (imports transformers; loaded once)."""
        if self._hf is None:
            from transformers import PreTrainedTokenizerFast

            self._hf = PreTrainedTokenizerFast.from_pretrained(self.path)
        return self._hf

    def __getattr__(self, name: str) -> Any:  # only for attributes not set above
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.hf, name)

    def __len__(self) -> int:
        return len(self.hf)

    def __call__(self, text: Any, add_special_tokens: bool = True, **kwargs: Any) -> Any:
        if kwargs or not isinstance(text, str):
            return self.hf(text, add_special_tokens=add_special_tokens, **kwargs)
        return _Encoding(self._ids(text, add_special_tokens))

    def encode(self, text: Any, add_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        if kwargs or not isinstance(text, str):
            return self.hf.encode(text, add_special_tokens=add_special_tokens, **kwargs)
        return self._ids(text, add_special_tokens)

    def _ids(self, text: str, add_special_tokens: bool) -> list[int]:
        """The text's ids. A long text goes through ``encode_batch`` (the same ids), which lets go of the GIL while
        it works: ``encode`` holds it, so a 1 MB text tokenized in a server's worker thread stalled its event loop
        for the whole 1.6 s (agentrt.app.server.offload)."""
        if len(text) <= _LONG:
            return self._tok.encode(text, add_special_tokens=add_special_tokens).ids
        return self._tok.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids

    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str:
        if kwargs:
            return self.hf.decode(token_ids, skip_special_tokens=skip_special_tokens, **kwargs)
        if hasattr(token_ids, "tolist"):
            token_ids = token_ids.tolist()
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        if len(token_ids) > _LONG:  # as _ids: decode_batch lets go of the GIL, decode holds it
            return self._tok.decode_batch([token_ids], skip_special_tokens=skip_special_tokens)[0]
        return self._tok.decode(token_ids, skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, conversation: Any, tools: Any = None, documents: Any = None,
                            chat_template: str | None = None, add_generation_prompt: bool = False,
                            continue_final_message: bool = False, tokenize: bool = True, **kwargs: Any) -> Any:
        """transformers' ``apply_chat_template`` for one conversation rendered to text; the rest goes to it."""
        simple = (not tokenize and tools is None and documents is None and chat_template is None
                  and self.chat_template and isinstance(conversation, list) and conversation
                  and isinstance(conversation[0], dict) and not isinstance(continue_final_message, str)
                  and not (continue_final_message and add_generation_prompt)
                  and "return_assistant_tokens_mask" not in kwargs and "return_dict" not in kwargs)
        if not simple:
            return self.hf.apply_chat_template(
                conversation, tools=tools, documents=documents, chat_template=chat_template,
                add_generation_prompt=add_generation_prompt, continue_final_message=continue_final_message,
                tokenize=tokenize, **kwargs)
        chat = conversation
        if continue_final_message:  # transformers' way: tag the final message, render, cut at the tag
            chat = deepcopy(conversation)
            final = chat[-1].get("content")
            if not isinstance(final, str):
                return self.hf.apply_chat_template(conversation, continue_final_message=True, tokenize=False,
                                                   **kwargs)
            chat[-1]["content"] = final + _CONTINUE_TAG
        rendered = self._compiled().render(messages=chat, tools=None, documents=None,
                                           add_generation_prompt=add_generation_prompt,
                                           **{**self.special_tokens_map, **kwargs})
        if continue_final_message:
            if final.strip() not in rendered or _CONTINUE_TAG.strip() not in rendered:
                return self.hf.apply_chat_template(conversation, continue_final_message=True, tokenize=False,
                                                   **kwargs)  # transformers raises its own error
            at = rendered.rindex(_CONTINUE_TAG.strip())
            kept = rendered[at:at + len(_CONTINUE_TAG)] == _CONTINUE_TAG  # else the template trimmed the space
            rendered = rendered[:at] if kept else rendered[:at].rstrip()
        return rendered

    def _compiled(self) -> Any:
        """The chat template in the jinja2 environment transformers uses (``chat_template_utils``)."""
        if self._template is None:
            from datetime import datetime

            import jinja2
            import jinja2.ext
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            def raise_exception(message: str) -> None:
                raise jinja2.exceptions.TemplateError(message)

            def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
                       sort_keys: bool = False) -> str:
                return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                                  sort_keys=sort_keys)

            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=[jinja2.ext.loopcontrols])
            env.filters["tojson"] = tojson
            env.globals["raise_exception"] = raise_exception
            env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
            self._template = env.from_string(self.chat_template)
        return self._template


def lean_tokenizer(path: Path) -> LeanTokenizer | None:
    """A ``LeanTokenizer`` for the folder, or None where transformers' tokenizer must do the work."""
    try:
        config = json.loads((path / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return None
    template_file = path / "chat_template.jinja"
    template = template_file.read_text() if template_file.is_file() else config.get("chat_template")
    if (not (path / "tokenizer.json").is_file() or config.get("clean_up_tokenization_spaces")
            or not isinstance(template, (str, type(None)))
            or (template and re.search(r"\{%-?\s*generation\s*-?%\}", template))
            or config.get("tokenizer_class") not in _PLAIN_CLASSES
            or any(k in config for k in ("add_bos_token", "add_eos_token", "extra_special_tokens",
                                         "additional_special_tokens", "added_tokens_decoder"))):
        return None
    return LeanTokenizer(path, config, template)


def _qwen2_pipeline(tok: Any, add_prefix_space: bool) -> None:
    """What transformers' ``Qwen2Tokenizer`` does to the folder's BPE whatever its tokenizer.json says: NFC
    normalization, Qwen's split regex, byte-level bytes (a converted GGUF's tokenizer.json has no normalizer,
    so "e" + combining acute would otherwise tokenize unlike transformers)."""
    from tokenizers import decoders, normalizers, pre_tokenizers, Regex

    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=False)])
    tok.decoder = decoders.ByteLevel()


def _content(token: Any) -> str:
    return token["content"] if isinstance(token, dict) else str(token)
