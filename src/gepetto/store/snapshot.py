"""A plain-data picture of a stored run (for `show`, `export` and the HTML report), finished or not."""

from __future__ import annotations

import json
from typing import Any

from gepetto.engine.pareto import ParetoArchive, best_index, evidence
from gepetto.events import StopReason
from gepetto.store.sqlite import RunStore


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def run_snapshot(store: RunStore, name: str, n_samples: int = 8) -> dict[str, Any]:
    """Run info, the result (rebuilt from stored candidates while a run is unfinished) and sample outputs."""
    info = store.get_run(name)
    if info is None:
        known = ", ".join(r.name for r in store.list_runs()) or "none"
        raise KeyError(f"no run named {name!r} in {store.path} (runs: {known})")
    cands = store.candidates(name)
    result = _with_stop(info.result) if info.result else _partial_result(store, name, cands, info.config)
    samples = _samples(store, name, result, n_samples) if cands else []
    run = {"name": info.name, "status": info.shown_status, "seed": info.seed, "created": info.created,
           "updated": info.updated, "config": info.config, "task": info.config.get("task", ""),
           "task_lm": info.config.get("task_lm", ""), "reflection_lm": info.config.get("reflection_lm", "")}
    return {"run": run, "result": result, "samples": samples}


def _with_stop(result: dict[str, Any]) -> dict[str, Any]:
    """`stop_reason` as a StopReason value (or None) and `stop_message` for people, also for a run stored before
    stop reasons were typed (its `stop_reason` was the message)."""
    stored = result.get("stop_reason")
    reason = StopReason.parse(stored)
    message = result.get("stop_message") or stored or ""
    return {**result, "stop_reason": reason.value if reason else None, "stop_message": message}


def _best(cands: list[dict]) -> dict | None:
    i = best_index([c["mean"] for c in cands], evidence([c["val_scores"] for c in cands]))
    return None if i is None else cands[i]


def _partial_result(store: RunStore, name: str, cands: list[dict], config: dict) -> dict[str, Any]:
    val_ids = list(cands[0]["val_scores"]) if cands else []
    archive = ParetoArchive(len(val_ids))
    history: list[list[float]] = []
    for c in cands:
        archive.add([c["val_scores"][i] for i in val_ids])
        top = float(archive.means()[archive.best()])
        if not history or history[-1][1] != top:
            history.append([c["rollouts_at_creation"], top])
    best = _best(cands)
    return {
        "best_candidate": best["texts"] if best else {}, "best_score": best["mean"] if best else None,
        "seed_score": cands[0]["mean"] if cands else None, "candidates": cands, "pareto_front": archive.front,
        "rollouts_used": store.count_rollouts(name), "budget": config.get("budget"), "ledger": store.ledger(name),
        "stop_reason": None, "stop_message": "(unfinished)",
        "iterations": max((c["iteration"] for c in cands), default=0), "proposals": {}, "history": history,
        "wall_seconds": None, "raced_out": _raced_out(store, name),
    }


def _raced_out(store: RunStore, name: str) -> list[dict[str, Any]]:
    """The children racing cut short (EngineConfig.racing), from the event log: each once (a resumed session
    replays the cut and logs it again), in the order first logged."""
    seen: dict[str, dict[str, Any]] = {}
    for e in store.events(name, "cut"):
        data = {k: v for k, v in e["data"].items() if k != "session"}
        seen.setdefault(data.get("id", ""), data)
    return list(seen.values())


def _samples(store: RunStore, name: str, result: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """Validation examples where the best candidate and the seed differ most, with both outputs."""
    cands = result["candidates"]
    seed, best = cands[0], _best(cands) or cands[0]
    rollouts = store.rollouts(name)
    examples = store.examples(name, "val")
    order = sorted(seed["val_scores"], key=lambda i: (-abs(best["val_scores"][i] - seed["val_scores"][i]), i))
    out = []
    for eid in order[:n]:
        ex = examples.get(eid, {"inputs": {}, "gold": None})
        entry: dict[str, Any] = {"example_id": eid, "inputs": _text(ex["inputs"]), "gold": _text(ex["gold"])}
        for label, cand in (("seed", seed), ("best", best)):
            r = rollouts.get((cand["id"], eid))
            entry[label] = {"output": _text(r.output) if r else "", "score": r.score.value if r else None,
                            "feedback": r.score.feedback if r else ""}
        out.append(entry)
    return out
