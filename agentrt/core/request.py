"""A run request as one type: ``RunRequest`` (what to answer and how, plain data, validated once) and
``RunHooks`` (the live objects a run calls back into).

Every door builds the same object: ``Agent.arun(question, **kw)`` (``RunRequest.from_kwargs``), the CLI's
``preflight``, the server's ``plan_run`` and ``Session``. Each limit lives in one ``Field`` here; the
model's JSON schema documents it, and ``explain`` turns pydantic's ValidationError into the one-line
``InputError`` that the SDK raises, the CLI prints (exit 2) and the server answers (400). Adding an
option is one ``Field`` here plus its use: ``arun``'s signature, the server's body and the schema follow.

Also here, as the one owner of each idea: whether a prompt fits (``check_fit``), which of the newest
messages fit an allowance (``newest_that_fit``), and the default budget sized to a long prompt.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema, field_validator

from agentrt.core.confidence import ConfidenceMode
from agentrt.core.errors import InputError
from agentrt.core.types import ROUTES, TIER_ROUTES, GenParams, Message, check_tier_name

# The model calls whose text is the answer the user sees (direct and reason: "answer"; reason's parallel
# samples: "sample"; ask: its question); ``AnswerOptions.shape`` applies the caller's answer knobs to these only.
ANSWER_STEPS = frozenset({"answer", "sample", "ask"})


def check_text(text: Any, what: str) -> str:
    """``text`` if it is a non-empty string of valid Unicode, else ``InputError``."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"the {what} is empty; pass a non-empty {what}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"the {what} is not valid Unicode (it holds a lone surrogate); send UTF-8 text") from None
    return text


def _text(value: Any, what: str) -> str:
    try:
        return check_text(value, what)
    except InputError as e:  # pydantic reports a ValueError raised in a validator with its own text
        raise ValueError(str(e)) from None


def check_route(value: str) -> str:
    """A route's name, or ``ROUTE@TIER`` on a model tier (ValueError naming the choices otherwise)."""
    route, sep, tier = value.partition("@")
    if route not in ROUTES:
        raise ValueError(f"unknown route {value!r}; choose one of: {', '.join(ROUTES)} (ROUTE@TIER on a model tier)")
    if sep:
        if route not in TIER_ROUTES:
            raise ValueError(f"route {route!r} runs on no tier; these do: {', '.join(TIER_ROUTES)}")
        check_tier_name(tier)
    return value


# A route's name, optionally on a model tier (``read@large``); the server's body reuses the type, so its check
# and its schema are these.
RouteName = Annotated[str, AfterValidator(check_route), WithJsonSchema(
    {"type": "string", "pattern": f"^({'|'.join(ROUTES)})(@[a-z][a-z0-9_-]{{0,31}})?$",
     "description": f"one of {', '.join(ROUTES)}; ROUTE@TIER runs it on a model tier"})]


def field_of(model: type[BaseModel], name: str) -> Any:
    """A copy of ``model``'s field ``name`` (its limits and description), for another model to declare it too."""
    return copy.copy(model.model_fields[name])


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AnswerOptions(_Options):
    """The route knobs of a run, and the caller's wishes for the answer the user sees.

    ``thinking_cap`` and ``samples`` steer the reason route. The rest (the server's OpenAI fields) is
    applied by ``shape`` to the calls in ANSWER_STEPS only: thoughts, plans and searches keep their own
    params (the run's budget bounds those).
    """

    thinking_cap: int | None = Field(default=None, ge=0, strict=True,
                                     description="reason: tokens of thought (None: settings.thinking_cap)")
    samples: int = Field(default=1, ge=1, le=64, strict=True,
                         description="reason: parallel samples, one kept by the verifier or a majority vote")
    max_tokens: int | None = Field(default=None, ge=1, strict=True, json_schema_extra={"unit": "tokens"},
                                   description="each answer call's completion-token limit (the budget still clips)")
    stop: list[str] = Field(default_factory=list, description="more stop strings for the answer")
    top_p: float | None = Field(default=None, gt=0, le=1, description="nucleus sampling of the answer")
    top_k: int | None = Field(default=None, ge=-1, strict=True, description="sample the answer among the k likeliest "
                              "tokens (0 or -1: off, as vLLM)")
    min_p: float | None = Field(default=None, ge=0, le=1, description="drop answer tokens less likely than min_p x "
                                "the likeliest")
    repetition_penalty: float | None = Field(default=None, gt=0, le=10, description="> 1 penalizes answer tokens "
                                             "already in the prompt or output (vLLM's / transformers' rule)")
    n: int = Field(default=1, ge=1, le=16, strict=True, description="choices of the answer call")
    json_schema: dict[str, Any] | None = Field(default=None, description="constrain the answer to this JSON schema")
    confidence: ConfidenceMode | None = Field(
        default=None, description="stated confidence: off | tail | grammar | scored (None: settings.confidence)")

    @field_validator("stop", mode="before")
    @classmethod
    def _stops(cls, value: Any) -> list[str]:
        if value is None:
            return []
        stops = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else None
        if stops is None or not all(isinstance(s, str) and s for s in stops):
            raise ValueError(f"stop must be a non-empty string or a list of them, got {value!r}")
        return stops

    def shape(self, name: str, params: GenParams) -> GenParams:
        """``params`` of the call ``name`` with the answer knobs applied when it makes the answer."""
        if name not in ANSWER_STEPS:
            return params
        changes: dict[str, Any] = {}
        if self.max_tokens is not None:  # the caller's limit replaces the route's (the budget still clips)
            changes["max_tokens"] = self.max_tokens
        if self.stop:
            changes["stop"] = list(dict.fromkeys([*params.stop, *self.stop]))
        if self.top_p is not None:
            changes["top_p"] = self.top_p
        if self.top_k is not None:
            changes["top_k"] = max(0, self.top_k)
        if self.min_p is not None:
            changes["min_p"] = self.min_p
        if self.repetition_penalty is not None:
            changes["repetition_penalty"] = self.repetition_penalty
        if self.n > 1 and name == "answer":
            changes["n"] = self.n
        if self.json_schema is not None and name == "answer":
            changes["json_schema"] = self.json_schema
        return dataclasses.replace(params, **changes) if changes else params


class RunRequest(_Options):
    """One run: the conversation, the budget, how to route, how to sample, what to record.

    ``history`` is the earlier user/assistant turns and ``system`` the caller's system prompt; the router
    decides on the bare ``question``. ``route`` skips the router, ``router`` names another one (a spec such
    as ``"learned:router.json"``; a router object goes in ``RunHooks``). ``temperature`` / ``seed`` sample
    instead of greedy decoding. ``metadata`` goes into the trajectory record.
    """

    question: str = Field(description="the question (non-empty UTF-8 text)")
    history: list[Message] = Field(default_factory=list, description="earlier turns, role user or assistant")
    system: str | None = Field(default=None, description="the caller's system prompt")
    budget: int | None = Field(default=None, ge=1, strict=True, json_schema_extra={"unit": "tokens"},
                               description="tokens for the whole run, prompt + completion (None: settings.budget)")
    route: RouteName | None = Field(default=None, description="skip the router and run this route")
    router: str | None = Field(default=None, description="router spec: rules, self, learned:PATH, cascade, fixed:ROUTE")
    temperature: float | None = Field(default=None, ge=0, le=2,
                                      description="sample every greedy call at this temperature (None: settings)")
    seed: int | None = Field(default=None, strict=True, description="seed of the sampled calls")
    metadata: dict[str, Any] = Field(default_factory=dict, description="copied into the trajectory record")
    answer: AnswerOptions = Field(default_factory=AnswerOptions)

    @field_validator("question", mode="before")
    @classmethod
    def _question(cls, value: Any) -> str:
        return _text(value, "question")

    @field_validator("system", mode="before")
    @classmethod
    def _system(cls, value: Any) -> str | None:
        return None if value is None else _text(value, "system prompt")

    @field_validator("history", mode="before")
    @classmethod
    def _history(cls, value: Any) -> list[Message]:
        try:
            turns = [m if isinstance(m, Message) else Message(m["role"], m["content"]) for m in list(value or [])]
        except (KeyError, TypeError, AttributeError):
            raise ValueError("history must be a list of messages ({'role': 'user'|'assistant', 'content': str})") from None
        for m in turns:
            if m.role not in ("user", "assistant"):
                raise ValueError(f"history holds a {m.role!r} message; use role 'user' or 'assistant' (pass system= apart)")
            _text(m.content, "history message")
        return turns

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata(cls, value: Any) -> dict[str, Any]:
        try:  # it goes into the record as JSON: refuse now what the writer could not write later
            json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError, UnicodeEncodeError) as e:
            raise ValueError(f"metadata must be JSON-serializable UTF-8 text and numbers ({e}); "
                             "pass plain str/int/float/bool/list/dict values") from None
        return dict(value or {})

    @classmethod
    def from_kwargs(cls, question: Any, **kw: Any) -> RunRequest:
        """The request of ``Agent.arun(question, **kw)``: answer options may be given flat (``n=2``)."""
        unknown = [k for k in kw if k not in RunRequest.model_fields and k not in AnswerOptions.model_fields]
        if unknown:
            raise InputError(f"unknown option {unknown[0]!r}; known options: {', '.join(option_names())}")
        answer = {k: kw.pop(k) for k in list(kw) if k in AnswerOptions.model_fields}
        return validate(cls, {"question": question, **kw, "answer": answer})

    def amend(self, **changes: Any) -> RunRequest:
        """A copy with ``changes`` (flat, as ``from_kwargs`` takes them), validated again."""
        data = self.model_dump(exclude={"answer", "history"})
        data["history"] = list(self.history)
        answer = {**self.answer.model_dump(), **{k: changes.pop(k) for k in list(changes)
                                                if k in AnswerOptions.model_fields}}
        return validate(RunRequest, {**data, **changes, "answer": answer})

    def messages(self) -> list[Message]:
        """The conversation the routes answer: the system prompt, the history, the question."""
        head = [Message("system", self.system)] if self.system else []
        return head + list(self.history) + [Message("user", self.question)]


@dataclass
class RunHooks:
    """The live objects of a run (never serialized): observers, callbacks, per-run tools and backends."""

    on_event: Callable[[Any], None] | None = None  # observes the run's typed events (agentrt.core.events)
    approve_plan: Callable[[Any], Any] | None = None  # plan route: plan -> True / edited plan / False
    ask_user: Callable[[str], str] | None = None  # the ask_user tool: question -> reply
    verifier: Callable[[str], Any] | None = None  # answer -> bool or score, for reason's sample selection
    tools: list[Any] | None = None  # tools.base.Tool (None: settings.tools' safe defaults; []: none)
    # a ModelBackend replacing the agent's for this run (Any here: core.protocols imports this module)
    policy: Any = None
    router: Any = None  # a router object (with ``decide``) replacing the spec
    task: Any = None  # a trajectory RunTask or TaskInfo: the record carries it, with its reward

    @classmethod
    def split(cls, kw: dict[str, Any]) -> tuple[RunHooks, dict[str, Any]]:
        """The hooks among ``arun``'s keyword arguments, and the rest (a router object counts as a hook)."""
        names = {f.name for f in dataclasses.fields(cls)}
        hooks = {k: kw[k] for k in kw if k in names and (k != "router" or not isinstance(kw[k], str | None))}
        return cls(**hooks), {k: v for k, v in kw.items() if k not in hooks}


def option_names() -> list[str]:
    """Every keyword ``Agent.arun`` takes besides the question, in one list (request, answer, hooks)."""
    request = [n for n in RunRequest.model_fields if n not in ("question", "answer")]
    return request + list(AnswerOptions.model_fields) + [f.name for f in dataclasses.fields(RunHooks)
                                                         if f.name not in RunRequest.model_fields]


def signature(question_annotation: Any = str) -> inspect.Signature:
    """``arun``'s signature as derived from the models (shown by ``help()`` and IDEs)."""
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
              inspect.Parameter("question", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=question_annotation)]
    fields = {**RunRequest.model_fields, **AnswerOptions.model_fields}
    hooks = {f.name: f for f in dataclasses.fields(RunHooks)}
    for name in option_names():
        if name in fields:
            default = fields[name].get_default(call_default_factory=True)
            annotation = fields[name].annotation
        else:
            default, annotation = None, hooks[name].type
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
    return inspect.Signature(params)


# -- one clear line from a ValidationError ------------------------------------------------------------------

def validate(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """``model.model_validate(data)``, its first error as one ``InputError`` line (``.param``: the field)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        message, param = explain(e, model)
        error = InputError(message)
        error.param = param  # type: ignore[attr-defined]
        raise error from None


def explain(error: ValidationError, model: type[BaseModel] | None = None) -> tuple[str, str]:
    """The first error of ``error`` as one line saying what is wrong and how to fix it, and its field path."""
    err = error.errors(include_url=False)[0]
    loc = [str(x) for x in err["loc"]]
    where = ".".join(loc)
    if err["type"] == "value_error":  # our validators' messages are already whole sentences
        return str(err.get("ctx", {}).get("error", err["msg"])), where
    name = loc[-1] if loc else ""
    if err["type"] == "extra_forbidden":
        known = ", ".join(_known(model, loc[:-1])) if model is not None else ""
        return f"unknown option {name!r}" + (f"; known options: {known}" if known else ""), where
    if err["type"] == "missing":
        return f"{where} is required; pass it", where
    field = _field(model, loc) if model is not None else None
    if err["type"] == "literal_error":
        expected = str(err["ctx"]["expected"]).replace("'", "").replace(" or ", ", ")
        return f"{name} must be one of {expected}, got {err['input']!r}", where
    got = f", got {err['input']!r}" if "input" in err else ""
    must = _must(field) if field is not None else None
    return (f"{name} must be {must}{got}" if must else f"{where}: {err['msg']}{got}"), where


def _field(model: type[BaseModel], loc: list[str]) -> Any:
    """The FieldInfo at ``loc`` (through nested models), or None."""
    current: Any = model
    info = None
    for part in loc:
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return info if part.isdigit() else None
        info = fields[part]
        current = info.annotation
    return info


def _known(model: type[BaseModel] | None, loc: list[str]) -> list[str]:
    if model is None:
        return []
    if not loc:
        return list(model.model_fields)
    field = _field(model, loc)
    sub = getattr(field, "annotation", None) if field is not None else None
    return list(getattr(sub, "model_fields", {}))


def _must(field: Any) -> str | None:
    """What a field must be, in words, from its constraints (``ge``/``le``/``gt``/``lt`` and ``unit``)."""
    limits: dict[str, Any] = {}
    for m in field.metadata:
        for key in ("ge", "le", "gt", "lt"):
            if getattr(m, key, None) is not None:
                limits[key] = getattr(m, key)
    integer = "int" in str(field.annotation) and "float" not in str(field.annotation)
    kind = "an integer" if integer else "a number"
    unit = (field.json_schema_extra or {}).get("unit") if isinstance(field.json_schema_extra, dict) else None
    low, high = limits.get("ge"), limits.get("le")
    if unit and (low == 1 or limits.get("gt") == 0) and high is None:
        return f"a positive number of {unit}"
    if low is not None and high is not None:
        return f"{kind} from {low} to {high}" if integer else f"between {low} and {high}"
    if "gt" in limits and high is not None:
        return f"in ({limits['gt']}, {high}]"
    if low is not None:
        return f"{kind} >= {low}"
    if "int" in str(field.annotation):
        return kind
    if "dict" in str(field.annotation):
        return "a JSON object (a dict)"
    return None


# -- one owner each: does the prompt fit, which turns fit, the default budget -------------------------------

def check_fit(prompt_tokens: int, context_length: int, budget: int, *, what: str = "the conversation",
              lower_bound: bool = False) -> None:
    """Refuse a prompt of ``prompt_tokens`` longer than the model's context or not smaller than the budget.

    ``lower_bound``: the count is of part of the prompt only (the question alone, before the chat
    template), so a refusal is still right, and the message says so.
    """
    if prompt_tokens >= context_length:
        raise InputError(f"{what} is {prompt_tokens} tokens, longer than the model's context ({context_length}); "
                         "shorten it")
    if budget <= prompt_tokens:
        if lower_bound:
            raise InputError(f"budget {budget} is smaller than the prompt ({what} alone is {prompt_tokens} tokens, "
                             "before the chat template); raise the budget")
        raise InputError(f"budget {budget} is smaller than the prompt ({prompt_tokens} tokens); "
                         f"use a budget of at least {prompt_tokens + 16}")


def default_budget(default: int, prompt_tokens: int) -> int:
    """A budget for a caller who did not give one: the default, raised to half of it beyond a long prompt."""
    return max(default, prompt_tokens + default // 2)


def newest_that_fit(groups: Sequence[list[Message]], count_tokens: Callable[[list[Message]], int],
                    allowance: int) -> list[Message]:
    """The newest ``groups`` of messages (a turn, or one message each) whose tokens fit ``allowance``,
    oldest first: a conversation trimmed from its start, never cut inside a group."""
    kept: list[Message] = []
    used = 0
    for group in reversed(groups):
        used += count_tokens(group)
        if used > allowance:
            break
        kept[:0] = group
    return kept


__all__ = ["ANSWER_STEPS", "AnswerOptions", "RouteName", "RunHooks", "RunRequest", "check_fit", "check_text",
           "default_budget", "explain", "field_of", "newest_that_fit", "option_names", "signature", "validate"]
