"""The output canary: a fixed prompt, decoded greedily, whose completion is recorded once from a known-good
deployment and compared on every later deploy.

A server can answer fast and healthy with a different model behaviour — weights loaded in the wrong
order, a wrong quantisation scale, a changed rotary base — which no timing metric sees. Greedy decoding of
a fixed prompt on the same model gives the same text; a different text is that failure.

The canary file keeps the SHA-256 of the completion and its token count, not the text (unless asked),
so it can live beside a deployment's configuration without carrying what the model said.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from servewatch.errors import ServewatchError

SCHEMA = "servewatch.canary/1"
PROMPT = "Once upon a time, in a small town by the sea,"
MAX_TOKENS = 16
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Canary:
    prompt: str                       # servewatch's fixed prompt (not user data)
    max_tokens: int
    completion_sha256: str
    completion_tokens: int | None     # as the server's usage reported it
    completion_chars: int
    model: str                        # the served model's name, last path component only
    recorded_t: float
    text: str | None = None           # the completion itself, only with --keep-text

    def to_json(self) -> str:
        data = {"schema": SCHEMA, **asdict(self)}
        if self.text is None:
            del data["text"]
        return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


@dataclass(frozen=True)
class CanaryCheck:
    matches: bool
    line: str


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def recorded(text: str, tokens: int | None, model: str, t: float, *, keep_text: bool,
             prompt: str = PROMPT, max_tokens: int = MAX_TOKENS) -> Canary:
    return Canary(prompt=prompt, max_tokens=max_tokens, completion_sha256=digest(text), completion_tokens=tokens,
                  completion_chars=len(text), model=model_label(model), recorded_t=t,
                  text=text if keep_text else None)


def model_label(name: str) -> str:
    """A served model name may be a local path: keep its last component."""
    return name.rstrip("/").rsplit("/", 1)[-1][:120]


def parse(text: str, where: str) -> Canary:
    """A canary file's content; ServewatchError naming the file and what is wrong."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ServewatchError(f"{where}: not a canary file (not JSON: {exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ServewatchError(f"{where}: not a canary file (expected \"schema\": \"{SCHEMA}\")")
    expected = {"prompt": str, "max_tokens": int, "completion_sha256": str, "completion_chars": int, "model": str,
                "recorded_t": (int, float)}
    for key, kind in expected.items():
        if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
            raise ServewatchError(f"{where}: canary field {key!r} is missing or not a {_kind_name(kind)}")
    tokens = data.get("completion_tokens")
    if tokens is not None and (not isinstance(tokens, int) or isinstance(tokens, bool)):
        raise ServewatchError(f"{where}: canary field 'completion_tokens' is not a whole number")
    text_kept = data.get("text")
    if text_kept is not None and not isinstance(text_kept, str):
        raise ServewatchError(f"{where}: canary field 'text' is not a string")
    if not 1 <= data["max_tokens"] <= 4096 or len(data["completion_sha256"]) != 64:
        raise ServewatchError(f"{where}: canary fields out of range (max_tokens 1..4096, a 64-hex SHA-256)")
    return Canary(prompt=data["prompt"], max_tokens=data["max_tokens"], completion_sha256=data["completion_sha256"],
                  completion_tokens=tokens, completion_chars=data["completion_chars"], model=data["model"],
                  recorded_t=float(data["recorded_t"]), text=text_kept)


def compare(canary: Canary, text: str, tokens: int | None, model: str | None = None) -> CanaryCheck:
    """The answer (from `model`, when known) against the recording, as one line. Another model is never a
    match, whatever it answered: the canary vouches for the model it was recorded from."""
    n = f"{tokens} token(s)" if tokens is not None else f"{len(text)} character(s)"
    same_text = digest(text) == canary.completion_sha256 and (tokens is None or canary.completion_tokens is None
                                                              or tokens == canary.completion_tokens)
    if model is not None and model_label(model) != canary.model:
        what = "the same completion" if same_text else "a different completion"
        return CanaryCheck(False, f"canary MISMATCH: the model differs: the server answered as model {model_label(model)}, "
                            f"the canary was recorded from model {canary.model} ({what}, {n})")
    if same_text:
        return CanaryCheck(True, f"canary matches: {n}, the same completion as recorded from model {canary.model}")
    why = [f"the completion differs from the one recorded from model {canary.model}"]
    if tokens is not None and canary.completion_tokens is not None and tokens != canary.completion_tokens:
        why.append(f"{tokens} token(s) now, {canary.completion_tokens} recorded")
    elif len(text) != canary.completion_chars:
        why.append(f"{len(text)} character(s) now, {canary.completion_chars} recorded")
    if canary.text is not None:
        at = next((i for i, (a, b) in enumerate(zip(text, canary.text)) if a != b), min(len(text), len(canary.text)))
        why.append(f"first difference at character {at}")
    return CanaryCheck(False, "canary MISMATCH: " + "; ".join(why) + " (the same model decodes this prompt greedily to "
                        "the same text)")


def request_body(canary_or_none: Canary | None, model: str) -> dict:
    prompt = canary_or_none.prompt if canary_or_none else PROMPT
    max_tokens = canary_or_none.max_tokens if canary_or_none else MAX_TOKENS
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "top_p": 1,
            "seed": 0, "stream": False}


async def ask(url: str, canary: Canary | None, model: str | None, timeout_s: float = TIMEOUT_S):
    """(text, completion tokens, model) from the server; ServewatchError naming the URL on any failure."""
    from servewatch.sources import completions
    from servewatch.transport.contract import Http1Transport
    from servewatch.transport.urls import resolve

    base = resolve(url).base        # a bad URL, a host name that does not resolve: one line, status 2
    transport = Http1Transport()
    try:
        if model is None:
            found = await completions.served_model(transport, base, timeout_s=min(timeout_s, 30.0))
            if found.model is None:
                raise ServewatchError(f"{base}: {found.detail or 'no model to ask'}")
            model = found.model
        done = await completions.complete(transport, base, request_body(canary, model), timeout_s=timeout_s)
    finally:
        await transport.close()
    if done.error is not None or done.text is None:
        raise ServewatchError(f"{base}: {done.detail or done.error}")
    return done.text, done.tokens, model


def _kind_name(kind) -> str:
    return {str: "string", int: "whole number"}.get(kind, "number")
