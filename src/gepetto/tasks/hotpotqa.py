"""HotpotQA (distractor pool): two-hop question answering with BM25 retrieval over the distractor paragraphs.

Program (four components, all optimisable):
  query1      question -> first search query
  (retrieve)  BM25 top-k over the pool, k=5 by default
  summarize1  question + hop-1 passages -> summary of what was found
  query2      question + summary -> second search query, aimed at what is still missing
  (retrieve)  BM25 top-k again
  answer      question + summary + the passages of both hops -> short answer

The program returns a JSON-able dict: {"answer", "summary", "hops": [{"query", "titles"}, ...]}, so the metric
can say per hop which gold supporting paragraphs were found and which are still missing.

Metric: exact match (SQuAD normalisation: lowercase, no punctuation, no articles, single spaces) against any
gold span; token F1 goes into `Score.objectives["f1"]` (and `objectives["exact_match"]`). An empty answer or
the question echoed back scores 0.

Data: `hotpotqa/dev_subsampled.jsonl` (IRCoT format: question_id, question_text, answers_objects[].spans,
contexts[{title, paragraph_text, is_supporting}]), 500 questions. The loader shuffles them with `seed` and
splits them; defaults 50 train / 50 val / 100 test (at most 500 in all).

How this differs from the GEPA paper (as we read it):
- Corpus: the paper retrieves from the ~5M Wikipedia 2017 abstracts (ColBERTv2 server); here retrieval is
  BM25 (bm25s, English stopwords, no stemming) over the union of the 4,858 distractor paragraphs of this file,
  i.e. both gold paragraphs of every question are in the pool, alongside 8 topical distractors each and the
  other questions' paragraphs. Retrieval is much easier than open Wikipedia; scores are not comparable.
- Program: the paper's DSPy program uses the question itself as the first query, has a second summarisation
  module and asks for the answer from the two summaries; here the first query is written by a component
  (`query1`), there is one summary, and `answer` sees the summary plus the retrieved passages of both hops.
  k is 5 per hop (the paper retrieves more passages per hop).
- Data and splits: the paper draws its train/val/test from the HotpotQA train/dev sets with larger splits
  (hundreds of examples); here all splits come from the 500-question IRCoT dev subsample, 50/50/100 by default.
- Metric: exact match as in the paper; the per-hop retrieval feedback and the F1 objective are ours.
- LM budget per call is bounded: 60 tokens per query, 150 for the summary, 40 for the answer.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gepetto.program import Context, Task, TraceEntry
from gepetto.tasks.common import clean_line, exact_match, is_echo, normalize_answer, resolve_file, split, token_f1
from gepetto.types import Candidate, Example, Score

NAME = "HotpotQA (distractor pool)"
FOLDER, FILENAME = "hotpotqa", "dev_subsampled.jsonl"
QUERY_TOKENS, SUMMARY_TOKENS, ANSWER_TOKENS = 60, 150, 40

SEED_CANDIDATE: dict[str, str] = {
    "query1": "Write a search query to find a Wikipedia paragraph that helps answer the question. "
    "Reply with only the query.",
    "summarize1": "Summarize the passages, keeping only the facts that help answer the question.",
    "query2": "Given the question and a summary of what has been found so far, write a search query for the "
    "information that is still missing. Reply with only the query.",
    "answer": "Answer the question using the summary and the passages. Reply with only the short answer "
    "(a name, a date, a number, yes or no).",
}


# --- retrieval ------------------------------------------------------------------------------------------------



def _text(value: Any) -> str:
    """Text from the data file: the IRCoT files keep HTML entities (&quot;, &amp;) in titles and paragraphs."""
    return html.unescape(str(value))

class BM25Index:
    """BM25 over titled paragraphs (title and text indexed together), kept in memory."""

    def __init__(self, paragraphs: Sequence[tuple[str, str]]) -> None:
        import bm25s

        if not paragraphs:
            raise ValueError("BM25Index needs at least one paragraph")
        self.titles = [t for t, _ in paragraphs]
        self.texts = [p for _, p in paragraphs]
        corpus = self._tokenize([f"{t}. {p}" for t, p in paragraphs])
        self._bm25 = bm25s.BM25()
        self._bm25.index(corpus, show_progress=False)
        self._vocab = set(self._bm25.vocab_dict)

    @staticmethod
    def _tokenize(texts: list[str]) -> list[list[str]]:
        import bm25s

        return bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)

    def __len__(self) -> int:
        return len(self.titles)

    def search(self, query: str, k: int = 5) -> list[dict[str, Any]]:
        """The top-k paragraphs for `query` as {"title", "text", "score"}; [] when no query word is indexed."""
        tokens = [t for t in self._tokenize([str(query or "")])[0] if t in self._vocab]
        if not tokens or k <= 0:
            return []
        docs, scores = self._bm25.retrieve([tokens], k=min(k, len(self)), show_progress=False)
        return [{"title": self.titles[int(i)], "text": self.texts[int(i)], "score": float(s)}
                for i, s in zip(docs[0], scores[0], strict=True) if s > 0]


_INDEX_CACHE: dict[tuple[str, int, int], BM25Index] = {}


def _index_for(path: Path, rows: Sequence[Mapping[str, Any]]) -> BM25Index:
    """One index per data file (keyed by path, size and mtime), built on first use."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _INDEX_CACHE:
        seen: dict[tuple[str, str], None] = {}
        for row in rows:
            for ctx in row.get("contexts", []):
                seen.setdefault((_text(ctx.get("title", "")), _text(ctx.get("paragraph_text", ""))), None)
        _INDEX_CACHE[key] = BM25Index(list(seen))
    return _INDEX_CACHE[key]


# --- data -----------------------------------------------------------------------------------------------------


def read_rows(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def to_example(row: Mapping[str, Any]) -> Example:
    spans = [_text(s) for obj in row.get("answers_objects", []) for s in obj.get("spans", []) if str(s).strip()]
    supporting = [_text(c["title"]) for c in row.get("contexts", []) if c.get("is_supporting")]
    return Example(
        {"question": _text(row["question_text"])},
        gold={"answers": spans, "supporting_titles": list(dict.fromkeys(supporting))},
        id=f"hotpotqa-{row['question_id']}",
    )


# --- program --------------------------------------------------------------------------------------------------


def format_passages(passages: Sequence[Mapping[str, Any]]) -> str:
    if not passages:
        return "(no passages found)"
    return "\n".join(f"[{i}] {p['title']}: {p['text']}" for i, p in enumerate(passages, 1))


def make_program(index: BM25Index, k: int = 5) -> Any:
    """The two-hop program over `index`, retrieving `k` paragraphs per hop."""

    async def program(candidate: Candidate, example: Example, ctx: Context) -> dict[str, Any]:
        question = str(example.inputs["question"])
        query1 = clean_line(await ctx.lm("query1", f"Question: {question}", max_tokens=QUERY_TOKENS), "query")
        hop1 = index.search(query1, k)
        summary = (await ctx.lm("summarize1", f"Question: {question}\n\nPassages:\n{format_passages(hop1)}",
                                max_tokens=SUMMARY_TOKENS)).strip()
        query2 = clean_line(await ctx.lm("query2", f"Question: {question}\n\nSummary so far: {summary}",
                                         max_tokens=QUERY_TOKENS), "query")
        hop2 = index.search(query2, k)
        seen = {p["title"] for p in hop1}
        passages = hop1 + [p for p in hop2 if p["title"] not in seen]
        raw = await ctx.lm("answer", f"Question: {question}\n\nSummary: {summary}\n\n"
                                     f"Passages:\n{format_passages(passages)}", max_tokens=ANSWER_TOKENS)
        return {
            "answer": clean_line(raw, "answer"),
            "summary": summary,
            "hops": [{"query": query1, "titles": [p["title"] for p in hop1]},
                     {"query": query2, "titles": [p["title"] for p in hop2]}],
        }

    program.__name__ = "hotpotqa_two_hop"
    return program


# --- metric ---------------------------------------------------------------------------------------------------


def _answer_of(output: Any) -> str:
    if isinstance(output, Mapping):
        value = output.get("answer", "")
        return value.strip() if isinstance(value, str) else ""
    return output.strip() if isinstance(output, str) else ""


def _hops_of(output: Any) -> list[tuple[str, list[str]]]:
    hops = output.get("hops") if isinstance(output, Mapping) else None
    out = []
    for hop in hops if isinstance(hops, list) else []:
        if isinstance(hop, Mapping):
            titles = hop.get("titles")
            out.append((str(hop.get("query", "")), [str(t) for t in titles] if isinstance(titles, list) else []))
    return out


def _quote_list(items: Sequence[str]) -> str:
    return ", ".join(f'"{t}"' for t in items) if items else "none"


def retrieval_feedback(output: Any, supporting: Sequence[str]) -> str:
    """Per hop: the query, which gold supporting paragraphs it found, and which are still missing so far."""
    hops = _hops_of(output)
    if not hops:
        return "No retrieval record in the output (expected hops with queries and retrieved titles)."
    lines, found = [], set()
    for n, (query, titles) in enumerate(hops, 1):
        new = [t for t in supporting if t in titles]
        found.update(new)
        missing = [t for t in supporting if t not in found]
        lines.append(f"Hop {n} query {query!r} retrieved gold paragraphs: {_quote_list(new)}; "
                     f"still missing: {_quote_list(missing)}.")
    return " ".join(lines)


def metric(example: Example, output: Any, trace: list[TraceEntry]) -> Score:
    """Exact match against any gold span (value), with token F1 as an objective and per-hop retrieval feedback."""
    gold = example.gold if isinstance(example.gold, Mapping) else {}
    answers = [str(a) for a in gold.get("answers", [])] or [""]
    supporting = [str(t) for t in gold.get("supporting_titles", [])]
    gold_text = " or ".join(f'"{a}"' for a in answers)
    answer = _answer_of(output)
    hops = retrieval_feedback(output, supporting)
    if not normalize_answer(answer):
        return Score(0.0, f"No answer was given. The gold answer is {gold_text}. {hops}",
                     {"exact_match": 0.0, "f1": 0.0})
    if is_echo(answer, example.inputs.get("question", "")):
        return Score(0.0, f"The answer repeats the question instead of answering it. The gold answer is "
                          f"{gold_text}. {hops}", {"exact_match": 0.0, "f1": 0.0})
    em = float(any(exact_match(answer, a) for a in answers))
    f1 = max(token_f1(answer, a) for a in answers)
    if em:
        verdict = f"Correct: the answer {answer!r} matches the gold answer {gold_text}."
    elif f1 > 0:
        verdict = (f"Wrong: the answer {answer!r} only partly matches the gold answer {gold_text} (token F1 "
                   f"{f1:.2f}); exact match is required, so give exactly the short answer span, no extra words.")
    else:
        verdict = f"Wrong: the answer {answer!r} does not match the gold answer {gold_text}."
    return Score(em, f"{verdict} {hops}", {"exact_match": em, "f1": round(f1, 4)})


# --- loader ---------------------------------------------------------------------------------------------------


def load(
    data_dir: Any = None,
    *,
    seed: int = 0,
    n_train: int = 50,
    n_val: int = 50,
    n_test: int = 100,
    k: int = 5,
    **_: Any,
) -> Task:
    """Load the 500 questions, split them with `seed`, and index all their paragraphs for BM25 (once per file)."""
    path = resolve_file(data_dir, FOLDER, FILENAME)
    rows = read_rows(path)
    index = _index_for(path, rows)
    train, val, test = split([to_example(r) for r in rows], seed, n_train, n_val, n_test, "hotpotqa")
    return Task(
        name=NAME,
        program=make_program(index, k),
        metric=metric,
        seed_candidate=Candidate(SEED_CANDIDATE),
        trainset=train,
        valset=val,
        testset=test,
        description=f"Two-hop QA: BM25 (k={k}) over the {len(index)} HotpotQA distractor paragraphs of {path.name}; "
        "exact match against the gold span.",
    )
