"""Prompts and a schema shared by the backend tests (hf, vLLM in-process, vLLM over HTTP)."""

PROMPTS = [
    "What is the capital of France?",
    "Name three primary colors.",
    "Write one sentence about the sea.",
    "What is 2 + 2?",
    "Say hello in Spanish.",
]
SCHEMA = {
    "type": "object",
    "properties": {"route": {"enum": ["direct", "reason", "plan"]},
                   "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
    "required": ["route", "confidence"],
    "additionalProperties": False,
}
