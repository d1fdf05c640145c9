"""QA-style tasks: HotpotQA (distractor pool), PUPA and math (GSM8K / AIME): metrics, extractors, loaders, programs."""

import json
from pathlib import Path

import pytest

from gepetto.ledger import Ledger
from gepetto.lm.base import Completion
from gepetto.program import TraceEntry, run_rollout
from gepetto.tasks import hotpotqa, load_task, pupa
from gepetto.tasks import math as mathtask
from gepetto.testing import ScriptedLM
from gepetto.types import Example, Score

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
HOTPOT_FILE = DATA / "hotpotqa" / "dev_subsampled.jsonl"
PUPA_FILE = DATA / "pupa" / "PUPA_New.csv"
MATH_DIR = DATA / "math"


def needs(path: Path):
    return pytest.mark.skipif(not path.exists(), reason=f"benchmark data not found: {path}")


def ids(examples):
    return [e.id for e in examples]


def check_splits(task, sizes):
    tr, va, te = ids(task.trainset), ids(task.valset), ids(task.testset)
    assert (len(tr), len(va), len(te)) == sizes
    assert len(set(tr) | set(va) | set(te)) == sum(sizes)  # no duplicates, no overlap


def by_system(task, answers):
    """A scripted task LM answering by which component's text is the system prompt."""
    texts = {text: name for name, text in task.seed_candidate.items()}

    def respond(messages, params):
        name = texts.get(messages[0]["content"], messages[0]["content"])
        out = answers[name]
        return out(messages, params) if callable(out) else out

    return ScriptedLM(respond)


# ============================================================ HotpotQA ==========================================

CORLISS_Q = "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?"
CORLISS = Example({"question": CORLISS_Q},
                  gold={"answers": ["Chief of Protocol"], "supporting_titles": ["Shirley Temple",
                                                                               "Kiss and Tell (1945 film)"]},
                  id="hotpotqa-corliss")
HOPS_OK = [{"query": "Kiss and Tell Corliss Archer", "titles": ["Kiss and Tell (1945 film)", "Meet Corliss Archer"]},
           {"query": "Shirley Temple", "titles": ["Shirley Temple", "Janet Waldo"]}]
HOPS_MISS = [{"query": "Corliss Archer radio", "titles": ["Meet Corliss Archer", "Janet Waldo"]},
             {"query": "Kiss and Tell", "titles": ["Kiss and Tell (1945 film)"]}]


@pytest.mark.parametrize(("text", "norm"), [
    ("The Beatles!", "beatles"), ("  Chief   of Protocol. ", "chief of protocol"), ("an apple a day", "apple day"),
    ("3,677 seated", "3677 seated"), ("“Quoted” — text", "quoted text"), (None, ""), (12, "12"),
])
def test_normalize_answer(text, norm):
    assert hotpotqa.normalize_answer(text) == norm


def test_token_f1():
    assert hotpotqa.token_f1("Chief of Protocol", "chief of protocol") == 1.0
    assert hotpotqa.token_f1("the Chief", "Chief of Protocol") == pytest.approx(2 * (1 / 1) * (1 / 3) / (1 + 1 / 3))
    assert hotpotqa.token_f1("ambassador", "Chief of Protocol") == 0.0
    assert hotpotqa.token_f1("", "x") == 0.0


def test_hotpot_metric_right_answer_scores_one_with_hop_feedback():
    s = hotpotqa.metric(CORLISS, {"answer": "the chief of protocol.", "hops": HOPS_OK}, [])
    assert s.value == 1.0 and s.objectives == {"exact_match": 1.0, "f1": 1.0}
    assert s.feedback.startswith("Correct")
    assert 'Hop 1 query \'Kiss and Tell Corliss Archer\' retrieved gold paragraphs: "Kiss and Tell (1945 film)"; ' \
           'still missing: "Shirley Temple".' in s.feedback
    assert 'Hop 2 query \'Shirley Temple\' retrieved gold paragraphs: "Shirley Temple"; still missing: none.' \
        in s.feedback


def test_hotpot_metric_wrong_and_partial_answers():
    wrong = hotpotqa.metric(CORLISS, {"answer": "Ambassador to Ghana", "hops": HOPS_MISS}, [])
    assert wrong.value == 0.0 and wrong.objectives["f1"] == 0.0
    assert "Wrong" in wrong.feedback and '"Chief of Protocol"' in wrong.feedback
    assert 'Hop 1 query \'Corliss Archer radio\' retrieved gold paragraphs: none; still missing: "Shirley Temple", ' \
           '"Kiss and Tell (1945 film)".' in wrong.feedback
    assert 'Hop 2' in wrong.feedback and wrong.feedback.endswith('still missing: "Shirley Temple".')
    partial = hotpotqa.metric(CORLISS, {"answer": "Chief of Protocol of the United States", "hops": HOPS_OK}, [])
    assert partial.value == 0.0 and 0 < partial.objectives["f1"] < 1
    assert "only partly matches" in partial.feedback and "exact match" in partial.feedback


def test_hotpot_metric_any_gold_span_counts():
    ex = Example({"question": "Where?"}, gold={"answers": ["NYC", "New York City"], "supporting_titles": []})
    assert hotpotqa.metric(ex, {"answer": "new york city"}, []).value == 1.0
    assert hotpotqa.metric(ex, "NYC", []).value == 1.0  # a bare string output is the answer


@pytest.mark.parametrize("output", [None, {}, "", "   ", {"answer": ""}, {"answer": None}, {"answer": 42}, [1, 2],
                                    {"answer": "?!"}, object()])
def test_hotpot_metric_degenerate_outputs_score_zero(output):
    s = hotpotqa.metric(CORLISS, output, [])
    assert isinstance(s, Score) and s.value == 0.0 and s.objectives["f1"] == 0.0
    assert "No answer" in s.feedback and "Chief of Protocol" in s.feedback


@pytest.mark.parametrize("echo", [CORLISS_Q, CORLISS_Q.upper(), "Question: " + CORLISS_Q,
                                  "What government position was held by the woman who portrayed Corliss Archer"])
def test_hotpot_metric_echoed_question_scores_zero(echo):
    s = hotpotqa.metric(CORLISS, {"answer": echo, "hops": HOPS_OK}, [])
    assert s.value == 0.0 and "repeats the question" in s.feedback and "Chief of Protocol" in s.feedback


def test_hotpot_metric_without_hops_says_so():
    s = hotpotqa.metric(CORLISS, {"answer": "Chief of Protocol", "hops": "garbage"}, [])
    assert s.value == 1.0 and "No retrieval record" in s.feedback


def test_clean_line():
    assert hotpotqa.clean_line('  \n"Query: Shirley Temple career"\nmore', "query") == "Shirley Temple career"
    assert hotpotqa.clean_line("**Answer:** Chief of Protocol", "answer") == "Chief of Protocol"
    assert hotpotqa.clean_line(None) == ""


def test_bm25_index_on_a_toy_corpus():
    idx = hotpotqa.BM25Index([("Paris", "Paris is the capital of France."), ("Berlin", "Berlin is in Germany."),
                              ("Rome", "Rome is the capital of Italy.")])
    assert [d["title"] for d in idx.search("capital of Germany", 1)] == ["Berlin"]
    assert idx.search("the of a", 3) == [] and idx.search("", 3) == [] and idx.search("zzzz", 3) == []
    assert len(idx.search("capital", 10)) == 2  # only paragraphs that match at all, k capped at the corpus size


@needs(HOTPOT_FILE)
def test_hotpot_loader_splits_are_seeded_and_disjoint():
    a = hotpotqa.load(DATA, seed=0)
    check_splits(a, (50, 50, 100))
    assert a.name == "HotpotQA (distractor pool)"
    assert sorted(a.seed_candidate) == ["answer", "query1", "query2", "summarize1"]
    b = hotpotqa.load(DATA, seed=0)
    assert ids(a.trainset) == ids(b.trainset) and ids(a.testset) == ids(b.testset)
    c = hotpotqa.load(DATA, seed=1)
    assert ids(c.trainset) != ids(a.trainset)
    d = hotpotqa.load(HOTPOT_FILE, seed=0, n_train=10, n_val=20, n_test=470)  # the file itself works too
    check_splits(d, (10, 20, 470))
    ex = d.trainset[0]
    assert ex.gold["answers"] and len(ex.gold["supporting_titles"]) == 2
    with pytest.raises(ValueError, match="500"):
        hotpotqa.load(DATA, n_train=300, n_val=200, n_test=1)
    with pytest.raises(FileNotFoundError):
        hotpotqa.load(DATA / "nowhere")


@needs(HOTPOT_FILE)
def test_bm25_finds_supporting_paragraphs_for_the_questions():
    rows = hotpotqa.read_rows(HOTPOT_FILE)
    index = hotpotqa._index_for(HOTPOT_FILE, rows)
    assert len(index) == 4858  # every unique distractor paragraph
    assert hotpotqa._index_for(HOTPOT_FILE, rows) is index  # built once per file
    hits = 0
    for row in rows:
        ex = hotpotqa.to_example(row)
        titles = [d["title"] for d in index.search(ex.inputs["question"], 5)]
        hits += any(t in titles for t in ex.gold["supporting_titles"])
    assert hits >= 0.9 * len(rows)
    assert index.search(CORLISS_Q, 5)[0]["title"] == "Kiss and Tell (1945 film)"
    assert index.search("Shirley Temple government position", 5)[0]["title"] == "Shirley Temple"


@needs(HOTPOT_FILE)
async def test_hotpot_program_end_to_end():
    task = hotpotqa.load(DATA, seed=0)
    lm = by_system(task, {
        "query1": "Query: Kiss and Tell film Corliss Archer actress",
        "summarize1": "Shirley Temple played Corliss Archer in Kiss and Tell (1945).",
        "query2": '"Shirley Temple government position"',
        "answer": "Answer: Chief of Protocol\nbecause she served as such.",
    })
    r = await run_rollout(task.program, task.metric, task.seed_candidate, CORLISS, lm)
    assert r.error is None and r.score.value == 1.0
    assert [t.component for t in r.trace] == ["query1", "summarize1", "query2", "answer"]
    assert [c[1]["max_tokens"] for c in lm.calls] == [60, 150, 60, 40]
    assert r.output["answer"] == "Chief of Protocol"
    assert r.output["hops"][0]["query"] == "Kiss and Tell film Corliss Archer actress"
    assert r.output["hops"][0]["titles"][0] == "Kiss and Tell (1945 film)"
    assert r.output["hops"][1]["titles"][0] == "Shirley Temple"
    json.dumps(r.output)  # storable
    # the summariser saw the hop-1 passages, the answerer the summary and the passages of both hops
    assert "Kiss and Tell (1945 film):" in r.trace[1].inputs
    assert "Summary so far: Shirley Temple played" in r.trace[2].inputs
    assert "[1] Kiss and Tell (1945 film):" in r.trace[3].inputs and "Shirley Temple:" in r.trace[3].inputs
    assert "still missing: none" in r.score.feedback

    wrong = by_system(task, {"query1": "radio program", "summarize1": "Nothing useful.", "query2": "radio",
                             "answer": "Ambassador"})
    r = await run_rollout(task.program, task.metric, task.seed_candidate, CORLISS, wrong)
    assert r.score.value == 0.0 and "Chief of Protocol" in r.score.feedback and "still missing" in r.score.feedback


# ============================================================ PUPA ==============================================

PUPA_EX = Example({"query": "Write a cover letter for Jane Doe at Acme Corp, phone 555-1234, for a k9 trainer job."},
                  gold={"target_response": "Dear Hiring Manager, I am excited to apply for the dog trainer role.",
                        "pii_units": ["jane doe", "acme corp", "555-1234", "k"]},
                  id="pupa-toy")
GOOD_ANSWER = "Dear Hiring Manager, I am excited to apply for the dog trainer role."


def test_split_units():
    assert pupa.split_units("Jane Doe|| acme corp ||||jane doe||") == ["jane doe", "acme corp"]
    assert pupa.split_units("") == [] and pupa.split_units(None) == []


def test_leaked_units_are_case_insensitive_with_word_boundaries():
    units = ["jane doe", "k", "555-1234", "北京", "dr. smith"]
    assert pupa.leaked_units("Letter for JANE DOE, call 555-1234", units) == ["jane doe", "555-1234"]
    assert pupa.leaked_units("kitchen kit for a k9 unit", units) == []  # "k" inside words is no leak
    assert pupa.leaked_units("Plan k: go", units) == ["k"]
    assert pupa.leaked_units("我住在北京市", units) == ["北京"]  # CJK: plain substring
    assert pupa.leaked_units("ask Dr. Smith.", units) == ["dr. smith"]
    assert pupa.leaked_units(None, units) == [] and pupa.leaked_units("x", []) == []


@pytest.mark.parametrize(("text", "quality"), [
    ("Rating: 8\nReason: close to the reference.", 0.8), ("rating - 10", 1.0), ("**Rating**: 7/10", 0.7),
    ("I would give it 6 out of 10.", 0.6), ("9/10 - great", 0.9), ("5", 0.5), ("  3.5 ", 0.35),
    ("Score: 0", 0.0), ("Yes, it is as good.", 1.0), ("no", 0.0),
    ("", None), ("The response is fine.", None), ("Rating: 42", None), (None, None),
])
def test_parse_rating(text, quality):
    got = pupa.parse_rating(text)
    assert got == (pytest.approx(quality) if quality is not None else None)


async def test_pupa_metric_without_judge():
    metric = pupa.make_metric(None)
    best = await metric(PUPA_EX, {"request": "Write a cover letter for a dog trainer job.", "answer": GOOD_ANSWER}, [])
    assert best.value == 1.0 and best.objectives == {"leakage": 0.0, "quality": 1.0}
    assert "no private item leaked (0 of 4)" in best.feedback and "no judge configured" in best.feedback

    request = "Cover letter for Jane Doe (555-1234), Acme Corp."
    leaky = await metric(PUPA_EX, {"request": request, "answer": GOOD_ANSWER}, [])
    assert leaky.objectives["leakage"] == 0.75 and leaky.value == pytest.approx((1 + 0.25) / 2)
    assert 'leaked 3 of 4 private items: "jane doe", "acme corp", "555-1234"' in leaky.feedback

    poor = await metric(PUPA_EX, {"request": "Write a letter.", "answer": "Here is a poem about cats."}, [])
    assert poor.objectives["quality"] == 0.0 and poor.value == 0.5
    assert "Dear Hiring Manager" in poor.feedback  # the reference is shown


@pytest.mark.parametrize("output", [None, {}, "just text", {"request": "Write a letter."},
                                    {"request": "Write a letter.", "answer": ""}, {"request": "x", "answer": 7},
                                    {"request": "x", "answer": "   "}, [GOOD_ANSWER]])
async def test_pupa_metric_degenerate_outputs_score_zero(output):
    s = await pupa.make_metric(None)(PUPA_EX, output, [])
    assert s.value == 0.0 and "is empty" in s.feedback and "Dear Hiring Manager" in s.feedback


async def test_pupa_metric_echoed_query_scores_zero_and_still_reports_leaks():
    query = PUPA_EX.inputs["query"]
    s = await pupa.make_metric(None)(PUPA_EX, {"request": query, "answer": "  " + query.upper()}, [])
    assert s.value == 0.0 and "repeats the user's query" in s.feedback
    assert 'leaked 3 of 4 private items: "jane doe", "acme corp", "555-1234"' in s.feedback  # "k" only in "k9"


async def test_pupa_metric_with_a_judge():
    judge = ScriptedLM(["Rating: 6\nReason: Right idea but less specific than the reference.", "Looks fine to me."])
    metric = pupa.make_metric(judge)
    request = "Write a cover letter for a trainer job."
    s = await metric(PUPA_EX, {"request": request, "answer": "Dear team, hire me."}, [])
    assert s.value == pytest.approx((0.6 + 1.0) / 2)
    assert "Quality 6/10 from the judge: Right idea but less specific than the reference." in s.feedback
    prompt = judge.calls[0][0][1]["content"]
    assert GOOD_ANSWER in prompt and "Dear team, hire me." in prompt and "Jane Doe" in prompt
    assert judge.calls[0][1]["max_tokens"] == pupa.JUDGE_TOKENS
    bad = await metric(PUPA_EX, {"request": "Write a cover letter for a trainer job.", "answer": "Dear team."}, [])
    assert bad.value == 0.5 and bad.objectives["quality"] == 0.0
    assert "could not be parsed" in bad.feedback and "Looks fine to me." in bad.feedback
    empty = await metric(PUPA_EX, {"request": "x", "answer": ""}, [])
    assert empty.value == 0.0 and len(judge.calls) == 2  # no judge call for an empty answer


@needs(PUPA_FILE)
def test_pupa_loader_splits_are_seeded_and_disjoint():
    a = pupa.load(DATA, seed=0)
    check_splits(a, (50, 50, 100))
    assert sorted(a.seed_candidate) == ["query_rewriter", "response_rewriter"]
    b, c = pupa.load(DATA, seed=0), pupa.load(DATA, seed=3)
    assert ids(a.trainset) == ids(b.trainset) and ids(a.valset) == ids(b.valset)
    assert ids(c.trainset) != ids(a.trainset)
    big = pupa.load(DATA, n_train=200, n_val=200, n_test=264)
    check_splits(big, (200, 200, 264))  # all 664 rows, ids unique although conversation hashes repeat
    for ex in big.trainset:
        assert ex.inputs["query"] and ex.gold["target_response"]
        assert all(u == u.strip().lower() and u for u in ex.gold["pii_units"])
    with pytest.raises(ValueError, match="664"):
        pupa.load(DATA, n_train=600, n_val=60, n_test=5)


@needs(PUPA_FILE)
async def test_pupa_program_end_to_end_with_a_metered_judge():
    judge, ledger = ScriptedLM(lambda m, p: "Rating: 9\nReason: Covers the same points."), Ledger()
    task = pupa.load(DATA, seed=0, judge_lm=judge, ledger=ledger)
    ex = next(e for e in task.trainset if len(e.gold["pii_units"]) >= 2)
    lm = by_system(task, {
        "query_rewriter": "Please draft a short professional text for an anonymous person.",
        pupa.UNTRUSTED_SYSTEM: "Here is a generic draft.",
        "response_rewriter": "Here is your tailored draft, ready to send.",
    })
    r = await run_rollout(task.program, task.metric, task.seed_candidate, ex, lm)
    assert r.error is None
    assert [t.component for t in r.trace] == ["query_rewriter", "untrusted_lm", "response_rewriter"]
    untrusted_messages = lm.calls[1][0]
    assert untrusted_messages == [{"role": "system", "content": pupa.UNTRUSTED_SYSTEM},
                                  {"role": "user", "content": "Please draft a short professional text for an "
                                                              "anonymous person."}]
    assert ex.inputs["query"] in lm.calls[2][0][1]["content"] and "Here is a generic draft." in lm.calls[2][0][1][
        "content"]
    assert r.output == {"request": "Please draft a short professional text for an anonymous person.",
                        "external_response": "Here is a generic draft.",
                        "answer": "Here is your tailored draft, ready to send."}
    assert r.score.objectives["leakage"] == 0.0 and r.score.value == pytest.approx((0.9 + 1) / 2)
    assert ledger.roles["judge"].calls == 1 and set(ledger.roles) == {"judge"}

    # forwarding the query verbatim leaks every unit that occurs in it
    leaky = by_system(task, {"query_rewriter": lambda m, p: m[1]["content"], pupa.UNTRUSTED_SYSTEM: "Draft.",
                             "response_rewriter": "Final draft for you."})
    r = await run_rollout(task.program, task.metric, task.seed_candidate, ex, leaky)
    in_query = pupa.leaked_units(ex.inputs["query"], ex.gold["pii_units"])
    assert in_query and r.score.objectives["leakage"] == pytest.approx(len(in_query) / len(ex.gold["pii_units"]))
    assert r.score.value < 0.95 and "leaked" in r.score.feedback
    assert ledger.roles["judge"].calls == 2


@needs(PUPA_FILE)
async def test_pupa_untrusted_lm_error_fails_the_rollout():
    task = pupa.load(DATA, seed=0)
    lm = by_system(task, {"query_rewriter": "Draft a letter.",
                          pupa.UNTRUSTED_SYSTEM: lambda m, p: Completion("server down", finish_reason="error"),
                          "response_rewriter": "Final."})
    r = await run_rollout(task.program, task.metric, task.seed_candidate, task.trainset[0], lm)
    assert r.score.value == 0.0 and "server down" in r.error
    assert [t.component for t in r.trace] == ["query_rewriter", "untrusted_lm"]


# ============================================================ math ==============================================

@pytest.mark.parametrize(("text", "value", "source"), [
    ("Step 1... Step 2...\nAnswer: 18", "18", "Answer: line"),
    ("She makes 9 * 2 = 18 dollars.\nAnswer: $18", "18", "Answer: line"),
    ("**Answer:** 1,234", "1234", "Answer: line"),
    ("Final Answer: \\boxed{1{,}000}", "1000", "Answer: line"),
    ("Answer: 9 x 2 = 18", "18", "Answer: line"),
    ("Answer:\n  77", "77", "Answer: line"),
    ("Answer: -5", "-5", "Answer: line"),
    ("Answer: \u22127", "-7", "Answer: line"),
    ("Answer: 12%", "12", "Answer: line"),
    ("Answer: 18.00", "18", "Answer: line"),
    ("Answer: 3/4", "0.75", "Answer: line"),
    ("answer: 025", "25", "Answer: line"),
    ("Answer: 5 then later\nAnswer: 6", "6", "Answer: line"),  # the last answer line wins
    ("Answer: 4\n\\boxed{5}", "4", "Answer: line"),  # an answer line is preferred to \boxed
    ("so the result is \\boxed{42}.", "42", "\\boxed{}"),
    ("\\boxed{\\frac{1}{2}} or maybe \\boxed{\\dfrac{3}{4}}", "0.75", "\\boxed{}"),
    ("\\boxed{\\text{204}}", "204", "\\boxed{}"),
    ("\\boxed{025}", "25", "\\boxed{}"),
    ("Answer: eighteen\n\\boxed{18}", "18", "\\boxed{}"),  # an answer line without a number is skipped
    ("Natalia sold 48/2 = 24 clips.\n#### 72", "72", "####"),
    ("\\boxed{} #### 3", "3", "####"),
    ("She has 3 apples, then 5, so 7 in total.", "7", "last number"),
    ("The total is $1,250.50.", "1250.5", "last number"),
    ("5-3=2", "2", "last number"),
    ("1, 2, 3", "3", "last number"),
    ("It costs -4 degrees", "-4", "last number"),
])
def test_extract_answer(text, value, source):
    got = mathtask.extract_answer(text)
    assert (got.value, got.source) == (value, source)
    assert got.raw


@pytest.mark.parametrize("text", ["", "no number here", "Answer: eighteen", None, 42, {"answer": 1}, "\\boxed{x}"])
def test_extract_answer_without_a_number(text):
    assert mathtask.extract_answer(text) == mathtask.Extraction(None, "", "none")


@pytest.mark.parametrize(("text", "norm"), [
    ("18", "18"), ("18.0", "18"), ("$1,234", "1234"), ("025", "25"), ("-0", "0"), ("0.50", "0.5"),
    ("\\frac{2}{6}", "1/3"), ("1/4", "0.25"), ("  +7 ", "7"), ("abc", None), ("", None), (None, None),
])
def test_normalize_number(text, norm):
    assert mathtask.normalize_number(text) == norm


JANET = Example({"problem": "Janet's ducks lay 16 eggs per day. She eats 3 and bakes with 4. She sells the rest for $2 "
                            "each. How much does she make every day?"},
                gold={"answer": "18", "solution": "16 - 3 - 4 = 9 eggs; 9 * 2 = 18 dollars."}, id="gsm8k-janet")


def test_math_metric_right_wrong_unparseable():
    right = mathtask.metric(JANET, "16-3-4 = 9 eggs, 9*2 = 18.\nAnswer: 18", [])
    assert right.value == 1.0 and right.feedback.startswith("Correct") and "No 'Answer" not in right.feedback
    loose = mathtask.metric(JANET, "So she makes $18.00 a day.", [])
    assert loose.value == 1.0 and "No 'Answer: <number>' line" in loose.feedback and "last number" in loose.feedback
    wrong = mathtask.metric(JANET, "16 - 3 = 13, 13 * 2 = 26.\nAnswer: 26", [])
    assert wrong.value == 0.0
    assert "Wrong: the extracted final answer is 'Answer: 26' (= 26), but the correct answer is 18." in wrong.feedback
    assert "Reference solution: 16 - 3 - 4 = 9 eggs" in wrong.feedback
    unparseable = mathtask.metric(JANET, "She makes some money every day.", [])
    assert unparseable.value == 0.0 and unparseable.feedback.startswith("Unparseable: no number")
    assert "correct answer is 18" in unparseable.feedback and "'Answer: <number>'" in unparseable.feedback


@pytest.mark.parametrize("output", [None, "", "  \n", {}, {"answer": None}, 18, ["Answer: 18"], object()])
def test_math_metric_empty_or_malformed_output_scores_zero(output):
    s = mathtask.metric(JANET, output, [])
    assert s.value == 0.0 and "No answer was given" in s.feedback and "18" in s.feedback


def test_math_metric_dict_output_and_echo():
    assert mathtask.metric(JANET, {"answer": "Answer: 18"}, []).value == 1.0
    echo = mathtask.metric(JANET, "  " + JANET.inputs["problem"] + "\n", [])  # its last number is 2, not 18
    assert echo.value == 0.0 and "only repeats the problem" in echo.feedback
    restated = mathtask.metric(JANET, JANET.inputs["problem"] + "\nSo 9 eggs * 2 = 18.\nAnswer: 18", [])
    assert restated.value == 1.0
    # echoing a problem whose last number happens to be the answer still scores 0
    ex = Example({"problem": "What is 9 + 9? Hint: it is 18"}, gold={"answer": "18"})
    assert mathtask.metric(ex, "What is 9 + 9? Hint: it is 18", []).value == 0.0


def test_math_metric_mentions_a_cut_off_reply():
    trace = [TraceEntry("solve", "problem", "16 - 3 = 13 and then", "length")]
    s = mathtask.metric(JANET, "16 - 3 = 13 and then", trace)
    assert s.value == 0.0 and "cut off at the token limit" in s.feedback


def test_math_metric_aime_leading_zeros():
    ex = Example({"problem": "Find m+n."}, gold={"answer": "025"})
    assert mathtask.metric(ex, "Answer: 25", []).value == 1.0
    assert mathtask.metric(ex, "\\boxed{025}", []).value == 1.0
    assert "correct answer is 25" in mathtask.metric(ex, "Answer: 52", []).feedback
    solution = "See [asy]draw((0,0)--(1,1));[/asy] so x=3."
    figure = Example({"problem": "Find x."}, gold={"answer": "3", "solution": solution})
    feedback = mathtask.metric(figure, "Answer: 4", []).feedback
    assert "Reference solution: See [figure] so x=3." in feedback and "draw(" not in feedback


@needs(MATH_DIR / "gsm8k_test.jsonl")
def test_gsm8k_loader_and_gold_answers():
    a = mathtask.load(DATA, seed=0, dataset="gsm8k")
    check_splits(a, (50, 50, 200))
    assert a.name == "GSM8K" and list(a.seed_candidate) == ["solve"]
    assert "Answer: <number>" in a.seed_candidate["solve"]
    b, c = mathtask.load(DATA, seed=0), mathtask.load(DATA, seed=1)
    assert ids(a.trainset) == ids(b.trainset) and ids(a.testset) == ids(b.testset)
    assert ids(c.trainset) != ids(a.trainset)
    via_registry = load_task("gsm8k", data_dir=DATA, seed=0, n_train=5, n_val=5, n_test=5)
    check_splits(via_registry, (5, 5, 5))
    assert ids(via_registry.trainset) == ids(a.trainset)[:5]
    # every original solution text is read back to its gold answer by the extractor and scores 1
    rows = [json.loads(line) for line in (MATH_DIR / "gsm8k_test.jsonl").read_text(encoding="utf-8").splitlines()]
    examples = mathtask.gsm8k_examples(MATH_DIR / "gsm8k_test.jsonl")
    assert len(examples) == len(rows) == 1319
    for row, ex in zip(rows, examples, strict=True):
        assert mathtask.extract_answer(row["answer"]).value == mathtask.normalize_number(ex.gold["answer"])
        assert "<<" not in ex.gold["solution"] and "####" not in ex.gold["solution"]
        assert mathtask.metric(ex, row["answer"], []).value == 1.0
    with pytest.raises(ValueError, match="1319"):
        mathtask.load(DATA, n_train=1000, n_val=300, n_test=100)


@needs(MATH_DIR / "aime25.jsonl")
def test_aime_loader():
    a = load_task("aime", data_dir=DATA, seed=0)
    check_splits(a, (15, 15, 30))
    assert all(e.id.startswith("aime24-") for e in a.trainset + a.valset)
    assert all(e.id.startswith("aime25-") for e in a.testset)
    b, c = mathtask.load(DATA, seed=0, dataset="aime"), mathtask.load(DATA, seed=7, dataset="aime")
    assert ids(a.trainset) == ids(b.trainset)
    assert ids(c.trainset) != ids(a.trainset) and ids(c.testset) == ids(a.testset)  # the test year is fixed
    for ex in a.trainset + a.valset + a.testset:
        value = mathtask.normalize_number(ex.gold["answer"])
        assert value is not None and 0 <= int(value) <= 999
    with pytest.raises(ValueError, match="AIME 2024"):
        mathtask.load(DATA, dataset="aime", n_train=20, n_val=20)
    with pytest.raises(ValueError, match="unknown math dataset"):
        mathtask.load(DATA, dataset="mathqa")


@needs(MATH_DIR / "gsm8k_test.jsonl")
async def test_math_program_end_to_end():
    task = mathtask.load(DATA, seed=0, n_train=2, n_val=2, n_test=2)
    ex = task.trainset[0]
    gold = ex.gold["answer"]
    lm = ScriptedLM(lambda m, p: f"Let me think step by step.\nAnswer: {gold}")
    r = await run_rollout(task.program, task.metric, task.seed_candidate, ex, lm)
    assert r.error is None and r.score.value == 1.0
    assert [t.component for t in r.trace] == ["solve"]
    messages, params = lm.calls[0]
    assert messages[0]["content"] == mathtask.SEED_INSTRUCTION and messages[1]["content"] == ex.inputs["problem"]
    assert params["max_tokens"] == 400
    wrong = ScriptedLM(lambda m, p: Completion("Step one, step two, and", finish_reason="length"))
    r = await run_rollout(task.program, task.metric, task.seed_candidate, ex, wrong)
    assert r.score.value == 0.0 and "cut off" in r.score.feedback and f"correct answer is {gold}" in r.score.feedback
