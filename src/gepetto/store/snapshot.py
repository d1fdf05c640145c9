"""A plain-data picture of a stored run (for `show`, `export` and the HTML report), finished or not."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gepetto.engine.events import StopReason
from gepetto.engine.pareto import ParetoArchive, stored_best
from gepetto.store.sqlite import RunStore


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def run_snapshot(store: RunStore, name: str, n_samples: int = 8, *, transcripts: bool = True) -> dict[str, Any]:
    """Run info, the result (rebuilt from stored candidates while a run is unfinished), sample outputs, the latest
    held-out evaluation of each split (`gepetto evaluate`) and, with `transcripts`, what each proposal showed the
    reflection LM, what it answered and what became of it."""
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
    events = store.events(name)
    routes = [e["data"].get("text") for e in events if e["kind"] == "route"]  # the route of an "auto" run
    snapshot = {"run": run, "result": result, "samples": samples, "evaluations": latest_evaluations(events),
                "route": routes[-1] if routes else None}
    if transcripts:
        snapshot["transcripts"] = reflection_transcripts(events, store.lm_exchanges(name), result)
    return snapshot


def latest_evaluations(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The last `evaluation` event of each split (`gepetto evaluate`), by split, without its rollouts."""
    out: dict[str, dict[str, Any]] = {}
    for e in events:
        if e["kind"] == "evaluation":
            data = {k: v for k, v in e["data"].items() if k != "rollouts"}
            out[str(data.get("split", "test"))] = data
    return out


def _new_messages(messages: list[dict[str, Any]] | None, before: list[dict[str, Any]] | None) -> tuple[int, bool]:
    """Where the messages of an attempt start to differ from the attempt before it (a retry continues that
    conversation, told why its answer was refused), and whether it continues it."""
    if not messages or not before or len(before) >= len(messages) or messages[:len(before)] != before:
        return 0, False
    return len(before), True


def _verdict(test: dict[str, Any] | None, candidate: int | None, raced: bool, attempts: list[dict[str, Any]]) -> str:
    if test is not None:
        if not test.get("accepted"):
            return "not better on minibatch"
        if candidate is not None:
            return "accepted"
        return "raced out in validation" if raced else "accepted, not validated"
    if attempts and all(a.get("error") for a in attempts):
        return "reflection error"
    return "refused" if attempts else "no proposal"


def _child_of(test: dict[str, Any], candidates: list[dict[str, Any]]) -> int | None:
    """The candidate an accepted proposal became: a child of its parent whose changed text is the tested text."""
    parent = next((c for c in candidates if c.get("index") == test.get("parent")), None)
    for c in candidates:
        if c.get("parents") != [test.get("parent")] or parent is None:
            continue
        changed = [t for k, t in (c.get("texts") or {}).items() if (parent.get("texts") or {}).get(k) != t]
        if changed and "\n\n".join(changed) == test.get("text"):
            return c.get("index")
    return None


def reflection_transcripts(events: list[dict[str, Any]], exchanges: dict[str, dict[str, Any]],
                           result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each proposal of the run, in the order made: its parent and component, every reflection attempt (the
    messages shown, the answer, why vetting refused it), its minibatch test and what it became (a candidate, or
    why not). A resumed session replays the proposals of the sessions before it: they are shown once."""
    groups: dict[str, dict[str, Any]] = {}
    alias: dict[str, str] = {}  # a replayed proposal's id -> the id it had when first made
    owner: dict[str, str] = {}  # an answer's key -> the proposal it belongs to
    tests_seen: set[str] = set()
    raced_ids = {r.get("id") for r in result.get("raced_out") or []}
    candidates = list(result.get("candidates") or [])

    def group(pid: str, data: dict[str, Any]) -> dict[str, Any]:
        pid = alias.get(pid, pid)
        if pid not in groups:
            groups[pid] = {"proposal": pid, "parent": data.get("parent"), "component": data.get("component"),
                           "attempts": [], "test": None}
        return groups[pid]

    for e in events:
        data, kind = e["data"], e["kind"]
        if kind not in ("reflection", "reflection_error", "proposal") or data.get("proposal") is None:
            continue
        pid = str(data["proposal"])
        if kind in ("reflection", "reflection_error"):
            key = data.get("key")
            if key is not None and key in owner:  # the same request again: a replay of an earlier proposal
                if owner[key] != pid:
                    alias.setdefault(pid, owner[key])
                continue
            g = group(pid, data)
            if key is not None:
                owner[key] = g["proposal"]
            exchange = exchanges.get(key or "", {})
            g["attempts"].append({"attempt": data.get("attempt"), "key": key, "messages": exchange.get("messages"),
                                  "answer": exchange.get("text"), "finish_reason": exchange.get("finish_reason"),
                                  "rejected": data.get("rejected"), "error": data.get("error")})
        else:
            test = {k: data.get(k) for k in ("parent", "component", "text", "minibatch_before", "minibatch_after",
                                             "accepted", "rule", "pattern", "origin", "retested")}
            signature = json.dumps(test, sort_keys=True, default=str)
            if signature in tests_seen:  # a replayed test
                continue
            tests_seen.add(signature)
            group(pid, data)["test"] = test
    out = []
    for g in groups.values():
        before: list[dict[str, Any]] | None = None
        for a in g["attempts"]:
            a["new_from"], a["continues"] = _new_messages(a["messages"], before)
            before = a["messages"]
        test = g["test"]
        candidate = _child_of(test, candidates) if test and test.get("accepted") else None
        raced = bool(test and test.get("accepted") and candidate is None and raced_ids)
        g["candidate"] = candidate
        if candidate is not None:
            g["candidate_mean"] = next((c.get("mean") for c in candidates if c.get("index") == candidate), None)
        g["verdict"] = _verdict(test, candidate, raced, g["attempts"])
        out.append(g)
    return out


def _with_stop(result: dict[str, Any]) -> dict[str, Any]:
    """`stop_reason` as a StopReason value (or None) and `stop_message` for people, also for a run stored before
    stop reasons were typed (its `stop_reason` was the message)."""
    stored = result.get("stop_reason")
    reason = StopReason.parse(stored)
    message = result.get("stop_message") or stored or ""
    return {**result, "stop_reason": reason.value if reason else None, "stop_message": message}


def _best(cands: list[dict], result: Mapping[str, Any] | None = None) -> dict | None:
    i = stored_best(cands, result)
    return None if i is None else cands[i]


def _partial_result(store: RunStore, name: str, cands: list[dict], config: dict) -> dict[str, Any]:
    val_ids = list(cands[0]["val_scores"]) if cands else []
    archive = ParetoArchive(len(val_ids))
    history: list[list[float]] = []
    for c in cands:
        row = archive.add([c["val_scores"][i] for i in val_ids], c["parents"])
        if c.get("confirmed"):
            archive.promote(row)
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
    seed, best = cands[0], _best(cands, result) or cands[0]
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
