"""A two-step program of your own, optimised as a stored run: route support messages to a team.

Step 1 (`summarize`) states the customer's problem in one line; step 2 (`route`) picks the team that handles
it (billing, technical, shipping, account). The metric says in words what went wrong, which is what the
reflection LM learns from. Run it (see examples/README.md):

    gepetto optimize --task examples/support_router.py:make_task --run router --budget 150
    python examples/support_router.py --scripted     # in seconds, with scripted LMs instead of real ones
"""

from __future__ import annotations

import random
import re
import sys
from collections.abc import Sequence
from typing import Any

import gepetto
from gepetto import Candidate, Context, Example, Score, ScriptedLM, Task, TraceEntry

TEAMS = ("billing", "technical", "shipping", "account")

SEED = Candidate(
    summarize="State the customer's problem in one short sentence.",
    route="Pick the team for this problem: billing, technical, shipping or account. Answer with the team name only.",
)

# (message, team): short, hand-written, each about one problem
MESSAGES: list[tuple[str, str]] = [
    ("I asked for a refund two weeks ago and still have nothing.", "billing"),
    ("You charged twice for my March subscription, please fix it.", "billing"),
    ("The invoice for order 5531 shows the wrong company name.", "billing"),
    ("Where is my refund for the blender I sent back?", "billing"),
    ("My card was charged twice when I upgraded my plan.", "billing"),
    ("Can you resend the invoice? I need it for my accountant.", "billing"),
    ("The refund went to my old card, which is closed now.", "billing"),
    ("The invoice total does not match what the checkout page said.", "billing"),
    ("The app crashes every time I open the settings page.", "technical"),
    ("I get an error message 'code 502' when I upload a photo.", "technical"),
    ("The dashboard won't load on Firefox since yesterday.", "technical"),
    ("After the update the app crashes on start.", "technical"),
    ("Saving a report gives an error message about permissions.", "technical"),
    ("The export page won't load, it just spins.", "technical"),
    ("My package says delivered but it is not at my door.", "shipping"),
    ("The delivery was supposed to come Monday and it is Thursday.", "shipping"),
    ("The tracking number you sent does not work.", "shipping"),
    ("The package arrived with the box crushed and the lamp broken.", "shipping"),
    ("Can I change the delivery address for order 7730?", "shipping"),
    ("Tracking has not updated for six days.", "shipping"),
    ("The package was left at the wrong house.", "shipping"),
    ("I forgot my password and the reset mail never comes.", "account"),
    ("My login stopped working after I changed phones.", "account"),
    ("How do I change the email address on my profile?", "account"),
    ("Someone changed my password, I did not do it.", "account"),
    ("The login page says my account is locked.", "account"),
    ("I want to update the email address I signed up with.", "account"),
    ("Please reset my password, I am locked out.", "account"),
    ("Two-factor login codes arrive too late to use.", "account"),
    ("The refund amount was smaller than what I paid.", "billing"),
]


def examples() -> list[Example]:
    """Every example, with a stable id (sr-01 ... sr-30) that names it in every split."""
    return [Example({"message": text}, gold=team, id=f"sr-{i:02d}") for i, (text, team) in enumerate(MESSAGES, 1)]


async def program(candidate: Candidate, example: Example, ctx: Context) -> dict[str, str]:
    """Summarize, then route the summary; returns both (the metric shows the summary in its feedback)."""
    summary = await ctx.lm("summarize", example["message"])
    answer = await ctx.lm("route", f"Problem: {summary}\nTeams: {', '.join(TEAMS)}")
    return {"summary": summary.strip(), "team": answer.strip()}


def _team(answer: str) -> str | None:
    """The team an answer names: its first word that is a team name (LMs add punctuation and chatter)."""
    for word in re.findall(r"[a-z]+", answer.lower()):
        if word in TEAMS:
            return word
    return None


def metric(example: Example, output: Any, trace: list[TraceEntry]) -> Score:
    """1 for the right team; otherwise 0 with feedback that says what was wrong and what was expected."""
    gold, answer = example.gold, str(output.get("team", "")) if isinstance(output, dict) else str(output)
    summary = output.get("summary", "") if isinstance(output, dict) else ""
    team = _team(answer)
    if team == gold:
        return Score(1.0, f"Correct: the {gold} team handles this.")
    if team is None:
        return Score(0.0, f"The answer {answer[:80]!r} is not one of the teams ({', '.join(TEAMS)}); answer with "
                     f"exactly one team name. This problem belongs to the {gold} team.", pattern="not a team name")
    return Score(0.0, f"Routed to {team}, but this problem belongs to the {gold} team. Problem as summarized: "
                 f"{summary[:160]!r}.", pattern=f"{team} instead of {gold}")


def make_task(n_train: int = 12, n_val: int = 9, split_seed: int = 1) -> Task:
    """The support router as a gepetto Task: train, validation and test splits of the 30 examples, shuffled
    with `split_seed` (options from the command line: --task-option n_val=6)."""
    data = examples()
    if n_train < 1 or n_val < 1 or n_train + n_val >= len(data):
        raise ValueError(f"n_train + n_val must leave test examples out of {len(data)}")
    order = random.Random(split_seed).sample(data, len(data))
    return Task("support-router", program, metric, SEED, order[:n_train], order[n_train:n_train + n_val],
                order[n_train + n_val:], "route support messages to one of four teams, in two steps")


# ---- scripted LMs: the example end to end in seconds, with no model (tests, trying it out) ----------------
# A cue in the message decides the team. The scripted task LM routes a cue right only when the `route`
# instruction has a line that names the cue and its team, else it answers "technical"; the scripted
# reflection LM writes such a line for failures it is shown. Like gepetto.testing.sim, with a known optimum.
CUES = {"refund": "billing", "charged twice": "billing", "invoice": "billing", "crash": "technical",
        "error message": "technical", "won't load": "technical", "package": "shipping", "delivery": "shipping",
        "tracking": "shipping", "password": "account", "login": "account", "email address": "account"}


def _cue(text: str) -> str | None:
    found = [(text.lower().find(c), c) for c in CUES if c in text.lower()]
    return min(found)[1] if found else None


def _task_answer(messages: Sequence[dict[str, str]], params: dict[str, Any]) -> str:
    system, user = messages[0]["content"], messages[-1]["content"]
    cue = _cue(user)
    if not user.startswith("Problem:"):  # summarize: the problem, in the customer's words
        return f"The customer has a problem with {cue or 'something'}."
    for line in system.splitlines():
        if cue and cue in line.lower() and CUES[cue] in line.lower():
            return CUES[cue]
    return "technical"


def _reflection_answer(messages: Sequence[dict[str, str]], params: dict[str, Any]) -> str:
    # the reflection request; on a retry it is followed by the refused answer and a hint
    prompt = next(m["content"] for m in messages if "<current_instruction>" in m["content"])
    current = prompt.split("<current_instruction>\n", 1)[1].split("\n</current_instruction>", 1)[0]
    rules = []
    for block in prompt.split("=== Example ")[1:]:
        expected = re.search(r"belongs to the (\w+) team", block)
        cue = _cue(block.split("[Assistant's answer]", 1)[0])
        if expected and cue and cue not in current.lower():
            rules.append(f"- A problem about {cue} goes to {expected.group(1)}.")
    new = "\n".join([current, *dict.fromkeys(rules)][:3])  # at most two new rules at a time
    return f"<new_instruction>\n{new}\n</new_instruction>"


def scripted_task_lm() -> ScriptedLM:
    return ScriptedLM(_task_answer, name="scripted-router-task")


def scripted_reflection_lm() -> ScriptedLM:
    return ScriptedLM(_reflection_answer, name="scripted-router-reflection")


def main(argv: Sequence[str]) -> None:
    task = make_task()
    lms: dict[str, Any] = {}
    if "--scripted" in argv:
        lms = {"task_lm": scripted_task_lm(), "reflection_lm": scripted_reflection_lm()}
    result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                              program=task.program, budget=150, storage="gepetto.sqlite",
                              run="support-router" + ("-scripted" if lms else ""), **lms)
    print(result.summary())
    for component, text in result.best_candidate.items():
        print(f"--- {component}\n{text}")
    test = gepetto.evaluate(result.best_candidate, task.testset, task.metric, program=task.program,
                            **({"task_lm": scripted_task_lm()} if lms else {}))
    print(f"test score of the best candidate: {test.mean:.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
