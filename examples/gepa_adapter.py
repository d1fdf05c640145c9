"""A gepa adapter, unchanged, on gepetto's engine: gepa's own DefaultAdapter, optimising a system prompt.

The task: given a country, give its currency's ISO 4217 code. gepa's DefaultAdapter runs the system prompt on
each input with a model callable and scores with its ContainsAnswerEvaluator (1 when the answer contains
the code, else 0 with feedback naming it). gepetto brings the engine: budget contract, vetted proposals,
run store, report, and MLflow tracking if asked.

    python examples/gepa_adapter.py                 # local Qwen2.5-Coder 0.5B (task) and 1.5B (reflection)
    python examples/gepa_adapter.py --scripted      # scripted models: seconds, no model files
    python examples/gepa_adapter.py --scripted-reflection   # local task model, scripted reflection
    python examples/gepa_adapter.py --tracking mlflow   # also log to MLflow (MLFLOW_TRACKING_URI, ...)

Needs `pip install gepa` (for the DefaultAdapter; the integration itself does not import gepa).
"""

from __future__ import annotations

import argparse
import asyncio
import re

from gepa.adapters.default_adapter.default_adapter import DefaultAdapter

from gepetto import ScriptedLM
from gepetto.integrations import gepa_adapter

COUNTRIES = [("Japan", "JPY"), ("United Kingdom", "GBP"), ("India", "INR"), ("Switzerland", "CHF"),
             ("Brazil", "BRL"), ("Canada", "CAD"), ("Mexico", "MXN"), ("China", "CNY"), ("Sweden", "SEK"),
             ("Australia", "AUD"), ("South Korea", "KRW"), ("Norway", "NOK")]
DATA = [{"input": country, "additional_context": {}, "answer": code} for country, code in COUNTRIES]
SEED = {"system_prompt": "You are a helpful assistant."}


def local_model(name: str = "qwen2.5-coder-0.5b"):
    """A model callable for DefaultAdapter (messages -> text) on gepetto's embedded llama.cpp backend."""
    from gepetto.lm.local import LocalLM

    lm = LocalLM(name)

    def model(messages) -> str:
        # the adapter runs in a gepetto worker thread: a short event loop of its own per call
        return asyncio.run(lm.complete(list(messages), temperature=0.0, max_tokens=24)).text

    return model


def scripted_model(messages) -> str:
    """Answers with the code only when the system prompt asks for a currency code."""
    system, country = messages[0]["content"].lower(), messages[-1]["content"]
    if "currency code" in system:
        return dict(COUNTRIES).get(country, "XXX")
    return f"{country} is a country with a rich history."


def scripted_reflection(messages, params) -> str:
    prompt = messages[-1]["content"]
    codes = re.findall(r"The correct answer is '([A-Z]{3})'", prompt)
    return ("Lessons:\n- the answer must be the ISO 4217 currency code, e.g. " + ", ".join(codes[:2]) +
            "\n<new_instruction>You are given the name of a country. Reply with the three-letter ISO 4217 currency "
            "code of its currency, and nothing else.</new_instruction>")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scripted", action="store_true", help="scripted task and reflection models (fast, offline)")
    ap.add_argument("--scripted-reflection", action="store_true", help="the local task model, a scripted reflection")
    ap.add_argument("--budget", type=int, default=42)
    ap.add_argument("--storage", default=None, help="run store (SQLite) to keep the run in, e.g. gepetto.sqlite")
    ap.add_argument("--run", default=None, help="run name in the store (an existing run is resumed)")
    ap.add_argument("--tracking", "--track", dest="tracking", default=None, choices=["mlflow"])
    args = ap.parse_args()

    model = scripted_model if args.scripted else local_model()
    scripted = args.scripted or args.scripted_reflection
    reflection = ScriptedLM(scripted_reflection) if scripted else "local:qwen2.5-coder-1.5b"
    adapter = DefaultAdapter(model=model)
    result = gepa_adapter.optimize(adapter, SEED, DATA[:6], DATA[6:], reflection_lm=reflection, budget=args.budget,
                                   storage=args.storage, run=args.run, tracking=args.tracking, merge="off")
    print(result.summary())
    print("best system prompt:", result.best_candidate["system_prompt"])
    print("proposals:", {str(outcome): n for outcome, n in result.proposals.items()})


if __name__ == "__main__":
    main()
