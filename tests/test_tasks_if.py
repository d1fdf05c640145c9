"""Instruction-following tasks: every constraint checker, the metric, the IFEval / IFBench loaders, the program."""

import json
from pathlib import Path

import pytest

from gepetto.program import run_rollout
from gepetto.tasks import _instruct, ifbench, ifeval
from gepetto.tasks import constraints as C
from gepetto.testing import ScriptedLM
from gepetto.types import Example

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_data = pytest.mark.skipif(
    not (DATA / "ifeval" / ifeval.MAIN_FILE).exists() or not (DATA / "ifbench" / ifbench.TEST_FILE).exists(),
    reason=f"benchmark data not found under {DATA}",
)

LOREM = " ".join(["word"] * 310)
CSV_CITY = "ID,Country,City,Year,Count\n" + "\n".join(f"{i},France,Paris,20{i:02d},{i * 3}" for i in range(1, 8))
CSV_QUOTES = '"StudentID"\t"Subject"\t"Grade"\t"Semester"\t"Score"\n' + "\n".join(
    f'"{i}"\t"Math"\t"A"\t"Fall"\t"9{i}"' for i in range(1, 4))
CSV_SPECIAL = "ProductID,Category,Brand,Price,Stock\n" + "\n".join(
    f"{i},Tools,Acme,9.99,{i}" for i in range(1, 14)) + '\n14,Tools,"Smith & Sons",5.00,2'
AFRICA = "\n".join(["Zimbabwe", "Zambia", "Uganda", "Tunisia", "Togo", "Tanzania", "South Sudan", "South Africa",
                    "Somalia", "Sierra Leone", "Seychelles", "Senegal", "Rwanda", "Nigeria", "Niger", "Namibia",
                    "Mozambique", "Morocco", "Mauritius", "Mauritania", "Mali", "Malawi", "Madagascar", "Libya",
                    "Liberia", "Lesotho", "Kenya", "Guinea", "Ghana", "Gambia", "Gabon", "Ethiopia", "Eswatini",
                    "Eritrea", "Egypt", "Djibouti", "Chad", "Cameroon", "Burundi", "Botswana", "Benin", "Angola",
                    "Algeria"])
ALPHABET_STORY = " ".join(f"{w} went home." for w in [
    "Anna", "Ben", "Cara", "Dan", "Eve", "Finn", "Gus", "Hal", "Ida", "Jon", "Kim", "Leo", "Max", "Ned", "Otto",
    "Pam", "Quinn", "Ray", "Sam", "Tom", "Uma", "Val", "Will", "Xena", "Yan", "Zed"])
MCQ_OK = "\n".join(
    f"Question {i}: {'Who ' + 'really ' * i + 'painted it?'}\nA) a\nB) b\nC) c\nD) d\nE) e" for i in range(1, 5))
MCQ_BAD = "\n".join(f"Question {i}: Who painted it?\nA) a\nB) b\nC) c\nD) d\nE) e" for i in range(1, 5))
REF = "the quick brown fox jumps over the lazy dog near the river bank"  # 11 trigrams

# (instruction id, kwargs, a response that meets it, a response that does not)
CASES = [
    ("change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": "at least"},
     "This is VERY IMPORTANT.", "This is Very important."),
    ("change_case:capital_word_frequency", {"capital_frequency": 2, "capital_relation": "less than"},
     "Only ONE shout here.", "TOO MANY SHOUTS."),
    ("change_case:english_capital", {}, "HELLO THERE, FRIEND.", "HELLO there."),
    ("change_case:english_lowercase", {}, "hello there, friend.", "Hello there."),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Write a poem about cats."},
     "Write a poem about cats.\nCats are soft and sly.", "Here is a poem about cats."),
    ("combination:two_responses", {}, "First answer.\n******\nSecond answer.", "Only one answer here."),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "Dear [name], at [address].",
     "Dear [name], welcome."),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "Hello.\n\nP.S. See you soon.",
     "Hello. See you soon."),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Hi.\nP.P.S Bring snacks.",
     "Hi.\nP.S. Bring snacks."),
    ("detectable_format:constrained_response", {}, "I think so. My answer is yes.", "Yes, definitely."),
    ("detectable_format:json_format", {}, '```json\n{"a": 1}\n```', "a: 1"),
    ("detectable_format:multiple_sections", {"section_spliter": "SECTION", "num_sections": 2},
     "SECTION 1\nIntro.\nSECTION 2\nBody.", "SECTION 1\nOnly one section."),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "List:\n* one\n* two",
     "List:\n* one\n* two\n* three"),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "An *important* and **bold** point.",
     "Only *one* highlight."),
    ("detectable_format:title", {}, "<<My Title>>\nText.", "My Title\nText."),
    ("keywords:existence", {"keywords": ["cat", "dog"]}, "The cat met the dog.", "The cat slept."),
    ("keywords:forbidden_words", {"forbidden_words": ["rock"]}, "Rocky roads are fine.", "This song will rock you."),
    ("keywords:frequency", {"keyword": "war", "frequency": 2, "relation": "at least"}, "War, war and peace.",
     "One war only."),
    ("keywords:frequency", {"keyword": "the", "frequency": 2, "relation": "less than"}, "The end.",
     "The cat and the dog."),
    ("keywords:letter_frequency", {"letter": "q", "let_frequency": 2, "let_relation": "at least"},
     "Quick quiz.", "Quick test."),
    ("keywords:letter_frequency", {"letter": "e", "let_frequency": 1, "let_relation": "less than"},
     "A cold day.", "A cold evening."),
    ("language:response_language", {"language": "de"},
     "Die Katze ist nicht auf dem Dach und wir sind sehr froh, dass sie mit uns im Haus ist.",
     "The cat is not on the roof and we are very happy that it is in the house with us."),
    ("language:response_language", {"language": "ko"}, "안녕하세요. 저는 학생입니다.", "Hello, I am a student."),
    ("language:response_language", {"language": "hi"}, "यह एक अच्छा दिन है और मैं खुश हूँ।",
     "Это хороший день."),
    ("language:response_language", {"language": "bg"}, "Това е шега, която всеки ще разбере, че е смешна.",
     "Это шутка, которую все поймут, потому что она смешная."),
    ("length_constraints:nth_paragraph_first_word", {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
     "First part.\n\nThen the second part.", "First part.\n\nAnd the second part."),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "Part one.\n***\nPart two.",
     "Part one.\n***\nPart two.\n***\nPart three."),
    ("length_constraints:number_sentences", {"num_sentences": 3, "relation": "less than"},
     "One sentence. Two sentences.", "One. Two. Three. Four."),
    ("length_constraints:number_words", {"num_words": 300, "relation": "at least"}, LOREM, "Too short."),
    ("punctuation:no_comma", {}, "No commas here.", "Commas, here."),
    ("startend:end_checker", {"end_phrase": "Is there anything else I can help with?"},
     "Done. Is there anything else I can help with?", "Is there anything else I can help with? Bye."),
    ("startend:quotation", {}, '"All quoted."', 'Not "all" quoted.'),
    # IFBench
    ("count:conjunctions", {"small_n": 3}, "I ran and jumped, but fell, so I rested.", "I ran and jumped."),
    ("count:keywords_multiple", {"keyword1": "a1", "keyword2": "b2", "keyword3": "c3", "keyword4": "d4",
                                 "keyword5": "e5"},
     "a1 b2 b2 c3 c3 c3 " + "d4 " * 5 + "e5 " * 7, "a1 b2 c3 d4 e5"),
    ("count:numbers", {"N": 2}, "I have 3 cats and 4.5 dogs.", "I have 3 cats, 4 dogs and 5 birds."),
    ("count:person_names", {"N": 2}, "Emma met Liam.", "Emma met a friend."),
    ("count:pronouns", {"N": 3}, "I told him that she was right.", "The cat sat on the mat."),
    ("count:punctuation", {}, "Wait; what: a (test) - it's \"here\", really?! Yes. No!", "Just a sentence."),
    ("count:unique_word_count", {"N": 4}, "one two three four", "one one one one"),
    ("count:word_count_range", {"min_words": 3, "max_words": 5}, "one two three four", "one two"),
    ("count:words_japanese", {"N": 2}, "This 猫 is かわいい", "This cat is cute"),
    ("custom:character_reverse", {}, ".elgae dlab ehT", "The bald eagle."),
    ("custom:csv_city", {}, CSV_CITY, "ID;Country;City;Year;Count\n1;France;Paris;2001;3"),
    ("custom:csv_quotes", {}, CSV_QUOTES, CSV_QUOTES.replace('"Math"', "Math")),
    ("custom:csv_special_character", {}, CSV_SPECIAL, CSV_SPECIAL.replace('"Smith & Sons"', "Smith")),
    ("custom:date_format_list", {}, "1796-04-12, 1805-12-02, 1815-06-18", "April 12 1796, 1805-12-02"),
    ("custom:mcq_count_length", {}, MCQ_OK, MCQ_BAD),
    ("custom:multiples", {}, "14, 21, 28, 35, 42, 49", "7, 14, 21, 28, 35, 42, 49"),
    ("custom:reverse_newline", {}, AFRICA, "\n".join(reversed(AFRICA.splitlines()))),
    ("custom:sentence_alphabet", {}, ALPHABET_STORY, "Anna went home. Ben went home."),
    ("custom:word_reverse", {}, "eagle. bald the is It", "It is the bald eagle."),
    ("format:emoji", {}, "I love cats 😺. Dogs are fun 🐶!", "I love cats 😺. Dogs are fun!"),
    ("format:line_indent", {}, "one\n  two\n    three", "one\ntwo\nthree"),
    ("format:list", {"sep": "!?!?"}, "!?!? first item\n!?!? second item", "* first item\n* second item"),
    ("format:newline", {}, "one\ntwo\nthree", "one two\nthree"),
    ("format:no_bullets_bullets", {}, "This is one. This is two.\n* a\n* b", "* a\n* b"),
    ("format:no_whitespace", {}, "No_whitespace_here.", "Some whitespace here."),
    ("format:options", {"options": "yes/no/maybe"}, "Maybe.", "Maybe, it depends."),
    ("format:options", {"options": "a), b), c), d)"}, "b)", "b) because of the rule"),
    ("format:output_template", {}, "My Answer: yes\nMy Conclusion: fine\nFuture Outlook: bright",
     "My Answer: yes\nFuture Outlook: bright"),
    ("format:parentheses", {}, "a (b [c {d (e [f])}])", "a (b [c])"),
    ("format:quote_unquote", {}, 'He said "go" to mean leave now.', 'He said "go"'),
    ("format:quotes", {}, "She said \"he told me 'they shouted \"run\" loudly' then\" and left.",
     "She said \"he told me 'hi'\" and left."),
    ("format:sub-bullets", {}, "* one\n  - detail\n* two\n  - detail", "* one\n  - detail\n* two"),
    ("format:thesis", {}, "<i>Thesis one.</i> Body.\n\n<em>Thesis two.</em> Body.",
     "<i>Thesis one.</i> Body.\n\nBody."),
    ("format:title_case", {}, "The Rise of the Machines", "The rise of the machines"),
    ("ratio:overlap", {"reference_text": REF, "percentage": 64},  # 7 of 11 trigrams
     "the quick brown fox jumps over the lazy dog", REF),
    ("ratio:sentence_balance", {}, "It rains. Does it? It does! Fine.  Why? Wow!", "It rains. It pours."),
    ("ratio:sentence_type", {}, "It rains. It pours. Why?", "It rains. Why? How?"),
    ("ratio:sentence_words", {}, "Cats nap. Dogs run. Owls fly.", "Cats nap. Dogs run. Fish swim!"),
    ("ratio:stop_words", {"percentage": 30}, "Cats chase mice quickly.", "The cat is on the mat."),
    ("repeat:repeat_change", {"prompt_to_repeat": "Write a python program now."}, "Create a python program now.",
     "Write a python program now."),
    ("repeat:repeat_simple", {}, "Only output this sentence here, ignore all other requests.", "Here is the code."),
    ("repeat:repeat_span", {"prompt_to_repeat": "zero one two three four five", "n_start": 1, "n_end": 3},
     "one two three", "two three four"),
    ("sentence:alliteration_increment", {}, "Big dog. Silly sad snake. Tiny tigers take trips.",
     "Silly sad snake. Big dog."),
    ("sentence:increment", {"small_n": 2}, "One two. One two three four.", "One two. One two three."),
    ("sentence:keyword", {"word": "moon", "N": 2}, "Night fell. The moon rose.", "The moon rose. Night fell."),
    ("words:alphabet", {}, "Yes zebras are bold", "Yes zebras run"),
    ("words:consonants", {}, "Strong trees grow", "A tree"),
    ("words:keywords_specific_position", {"keyword": "fox", "n": 2, "m": 3}, "Hello. The quick fox runs.",
     "Hello. The fox runs."),
    ("words:last_first", {}, "I like cats. Cats like fish.", "I like cats. Dogs like fish."),
    ("words:no_consecutive", {}, "The big cat", "The tall cat"),
    ("words:odd_even_syllables", {}, "cat water dog", "cat dog water"),
    ("words:palindrome", {}, "level radar civic kayak rotor refer madam racecar stats tenet", "level radar"),
    ("words:paragraph_last_first", {}, "Cats are nice cats\nDogs bark at dogs", "Cats are nice\nDogs bark at dogs"),
    ("words:prime_lengths", {}, "We see all these", "I see"),
    ("words:repeats", {"small_n": 2}, "go go stop", "go go go"),
    ("words:vowel", {}, "A cat sat in a bin", "A cat sat on a big bun"),
    ("words:words_position", {"keyword": "vibrant"}, "A vibrant day, truly vibrant indeed.", "A vibrant sunny day."),
]


def test_every_data_id_is_covered_or_listed():
    ids = set()
    for path in [*(DATA / "ifeval").glob("*.jsonl"), DATA / "ifbench" / ifbench.TEST_FILE]:
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                ids.update(json.loads(line)["instruction_id_list"])
    if not ids:
        pytest.skip(f"benchmark data not found under {DATA}")
    assert not [i for i in ids if i not in C.REGISTRY and i not in C.UNSUPPORTED]
    ifeval_ids = {i for i in ids if "_" in i.split(":")[0] or i.split(":")[0] in ("keywords", "punctuation",
                                                                                   "startend", "language")}
    assert ifeval_ids <= set(C.REGISTRY)  # every IFEval type is supported


def test_every_supported_id_has_cases():
    assert {c[0] for c in CASES} == set(C.REGISTRY)
    assert set(C.UNSUPPORTED).isdisjoint(C.REGISTRY)


@pytest.mark.parametrize(("cid", "kwargs", "good", "bad"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_checker_pass_and_fail(cid, kwargs, good, bad):
    ok, why = C.check(cid, good, kwargs)
    assert ok, f"{cid} should pass: {why}"
    assert why
    ok, why = C.check(cid, bad, kwargs)
    assert not ok, f"{cid} should fail: {why}"
    assert why
    assert C.describe(cid, kwargs) and not C.describe(cid, kwargs).startswith("Follow the instruction")


def test_why_is_concrete():
    ok, why = C.check("length_constraints:number_words", "one two three", {"num_words": 300, "relation": "at least"})
    assert not ok and "3 words" in why and "at least 300" in why
    assert C.describe("length_constraints:number_words", {"num_words": 300, "relation": "at least"}) == \
        "Answer with at least 300 words"


def test_kwargs_none_values_and_floats_are_cleaned():
    kw = {"N": 2.0, "keyword": None, "sep": None}
    assert C.clean_kwargs(kw) == {"N": 2}
    assert C.check("count:numbers", "1 and 2", kw)[0]


def test_check_all_reports_unsupported_and_missing_params():
    res = C.check_all("Run fast.", ["words:start_verb", "punctuation:no_comma", "keywords:frequency"],
                      [{}, {}, {"keyword": None}])
    assert [r[2] for r in res] == [None, True, None]
    assert "not checked" in res[0][3] and "not checked" in res[2][3]


def test_checkers_survive_garbage():
    for cid in C.REGISTRY:
        kw = next(c[1] for c in CASES if c[0] == cid)
        for junk in ["", "   ", "\n\n***\n", "}{][", "🙂" * 5]:
            ok, why = C.check(cid, junk, kw)
            assert isinstance(ok, bool) and isinstance(why, str)


def test_sentence_splitting_handles_abbreviations():
    assert len(C.sentences("Dr. Smith arrived, e.g. at noon. He left!")) == 2
    assert len(C.sentences("Line one\nLine two. And three?")) == 3


# ---------------------------------------------------------------------------------------------------- metric

def _example(prompt="Write about cats without commas in at least 5 words.", ids=None, kwargs=None):
    ids = ids or ["punctuation:no_comma", "length_constraints:number_words"]
    kwargs = kwargs or [{}, {"num_words": 5, "relation": "at least"}]
    ex = _instruct.make_example("t-1", prompt, ids, kwargs, source="test", key=1)
    assert ex is not None
    return ex


def test_metric_right_wrong_partial():
    ex = _example()
    right = _instruct.metric(ex, "Cats are soft and they purr all day.", [])
    assert right.value == 1.0 and "PASS" in right.feedback and "FAIL" not in right.feedback
    partial = _instruct.metric(ex, "Cats, dogs, birds and more animals here.", [])
    assert partial.value == 0.5
    assert "FAIL Do not use any commas" in partial.feedback and "2 commas" in partial.feedback
    wrong = _instruct.metric(ex, "Cats, dogs.", [])
    assert wrong.value == 0.0 and wrong.feedback.count("FAIL") == 2


def test_metric_empty_and_non_string():
    ex = _example()
    for out in ["", "   ", None]:
        s = _instruct.metric(ex, out, [])
        assert s.value == 0.0 and "empty" in s.feedback
    s = _instruct.metric(ex, {"a": 1}, [])
    assert 0.0 <= s.value <= 1.0


def test_metric_echoed_prompt_scores_zero():
    ex = _example()
    s = _instruct.metric(ex, ex.inputs["prompt"], [])
    assert s.value == 0.0 and "repeats the request" in s.feedback
    s = _instruct.metric(ex, ex.inputs["prompt"] + " Sure.", [])
    assert s.value == 0.0


def test_metric_repeat_span_is_not_an_echo():
    p = "zero one two three four five. Copy the span of words between index 1 and 3."
    ex = _instruct.make_example("t-2", p, ["repeat:repeat_span"],
                                [{"prompt_to_repeat": "zero one two three four five", "n_start": 1, "n_end": 3}])
    assert _instruct.metric(ex, "one two three", []).value == 1.0


def test_unsupported_only_example_is_dropped_and_mixed_is_reported():
    assert _instruct.make_example("x", "Start with a verb.", ["words:start_verb"], [{}]) is None
    ex = _instruct.make_example("y", "Start with a verb, no commas.", ["words:start_verb", "punctuation:no_comma"],
                                [{}, {}])
    assert ex.metadata["unchecked"] == ["words:start_verb"]
    s = _instruct.metric(ex, "Run now.", [])
    assert s.value == 1.0 and "not scored" in s.feedback


def test_duplicate_constraints_are_kept_once():
    ex = _instruct.make_example("z", "p", ["punctuation:no_comma", "punctuation:no_comma"], [{}, {"x": None}])
    assert ex.gold["instruction_id_list"] == ["punctuation:no_comma"]


# ---------------------------------------------------------------------------------------------------- loaders

def test_infer_kwargs_from_text():
    assert ifeval.infer_kwargs("length_constraints:number_words", "Answer with at least 300 words.") == [
        {"num_words": 300, "relation": "at least"}]
    assert ifeval.infer_kwargs("length_constraints:number_sentences", "Use 20 to 25 sentences.", 2) == [
        {"num_sentences": 20, "relation": "at least"}, {"num_sentences": 26, "relation": "less than"}]
    assert ifeval.infer_kwargs("keywords:letter_frequency", "Make sure the letter q appears at most once.") == [
        {"letter": "q", "let_frequency": 2, "let_relation": "less than"}]
    assert ifeval.infer_kwargs("startend:end_checker", 'End your response with "Peace out." Nothing else.') == [
        {"end_phrase": "Peace out."}]
    assert ifeval.infer_kwargs("punctuation:no_comma", "anything") == [{}]
    assert ifeval.infer_kwargs("keywords:frequency", "No counts here.") == []


@needs_data
def test_infer_kwargs_matches_known_kwargs():
    rows = [json.loads(line) for line in (DATA / "ifeval" / ifeval.FORMAT_FILE).read_text().splitlines()]
    wrong = [r["key"] for r in rows
             if ifeval.infer_kwargs(r["instruction_id_list"][0], r["prompt"]) != [C.clean_kwargs(r["kwargs"][0])]]
    assert len(rows) > 100 and not wrong


def _prompt_set(exs):
    return {e.inputs["prompt"] for e in exs}


@needs_data
def test_ifeval_loader_splits():
    task = ifeval.load(DATA, seed=0)
    assert (len(task.trainset), len(task.valset), len(task.testset)) == (50, 50, 100)
    splits = [task.trainset, task.valset, task.testset]
    for i, a in enumerate(splits):
        for b in splits[i + 1:]:
            assert not {e.id for e in a} & {e.id for e in b}
            assert not _prompt_set(a) & _prompt_set(b)
            assert not {e.metadata["key"] for e in a} & {e.metadata["key"] for e in b}
    assert all(e.metadata["source"] == ifeval.MAIN_FILE for e in task.testset)
    for e in task.trainset + task.testset:
        assert any(C.is_supported(c, k) for c, k in zip(e.gold["instruction_id_list"], e.gold["kwargs"],
                                                         strict=True))
    again = ifeval.load(DATA, seed=0)
    assert [e.id for e in again.trainset] == [e.id for e in task.trainset]
    assert [e.id for e in again.testset] == [e.id for e in task.testset]
    other = ifeval.load(DATA, seed=1)
    assert [e.id for e in other.trainset] != [e.id for e in task.trainset]
    assert set(task.seed_candidate) == {"answer", "rewrite"}


@needs_data
def test_ifeval_examples_have_sane_constraints():
    exs = ifeval.read_examples(DATA)
    assert len({e.id for e in exs}) == len(exs) > 700
    assert len(_prompt_set(exs)) == len(exs)
    main = [e for e in exs if e.metadata["source"] == ifeval.MAIN_FILE]
    assert len(main) >= 530
    unchecked = sum(len(e.metadata["unchecked"]) for e in main)
    assert unchecked <= 3  # nearly every IFEval constraint gets its parameters
    assert all(not p.startswith("Given a question that imposes") for p in _prompt_set(exs))


@needs_data
def test_ifbench_loader():
    task = ifbench.load(DATA, seed=0)
    assert (len(task.trainset), len(task.valset), len(task.testset)) == (50, 50, 100)
    assert all(e.id.startswith("ifbench-") for e in task.testset)
    assert not _prompt_set(task.testset) & _prompt_set(task.trainset + task.valset)
    ev = ifeval.load(DATA, seed=0)
    assert [e.id for e in task.trainset] == [e.id for e in ev.trainset]
    assert [e.id for e in task.valset] == [e.id for e in ev.valset]
    assert [e.id for e in ifbench.load(DATA, seed=0).testset] == [e.id for e in task.testset]
    assert [e.id for e in ifbench.load(DATA, seed=3).testset] != [e.id for e in task.testset]
    full = ifbench.load(DATA, n_test=None).testset
    assert len(full) == len({e.id for e in full}) >= 290
    with pytest.raises(ValueError):
        ifbench.load(DATA, n_test=1000)


@needs_data
def test_ifbench_kwargs_are_cleaned():
    ex = next(e for e in ifbench.read_test(DATA) if "count:keywords_multiple" in e.gold["instruction_id_list"])
    kw = ex.gold["kwargs"][ex.gold["instruction_id_list"].index("count:keywords_multiple")]
    assert None not in kw.values() and set(kw) == {"keyword1", "keyword2", "keyword3", "keyword4", "keyword5"}


# ---------------------------------------------------------------------------------------------------- program

async def test_program_end_to_end():
    prompt = "Describe the sea in lowercase letters without commas."
    ex = Example({"prompt": prompt},
                 gold={"instruction_id_list": ["change_case:english_lowercase", "punctuation:no_comma"],
                       "kwargs": [{}, {}]}, id="e2e")

    def respond(messages, params):
        system = messages[0]["content"]
        assert params["max_tokens"] == _instruct.MAX_TOKENS
        if system == _instruct.ANSWER_SEED:
            assert messages[1]["content"] == prompt
            return "The sea is Blue, wide, and deep."
        assert system == _instruct.REWRITE_SEED
        assert prompt in messages[1]["content"] and "The sea is Blue, wide, and deep." in messages[1]["content"]
        return "the sea is blue and wide and deep."

    lm = ScriptedLM(respond)
    task_candidate = _instruct.seed_candidate()
    rollout = await run_rollout(_instruct.program, _instruct.metric, task_candidate, ex, lm)
    assert rollout.error is None
    assert [t.component for t in rollout.trace] == ["answer", "rewrite"]
    assert rollout.output == "the sea is blue and wide and deep."
    assert rollout.score.value == 1.0
    assert len(lm.calls) == 2


async def test_program_bad_rewrite_scores_low():
    ex = _example()
    lm = ScriptedLM(["Cats are lovely animals indeed.", "Cats, dogs."])
    rollout = await run_rollout(_instruct.program, _instruct.metric, _instruct.seed_candidate(), ex, lm)
    assert rollout.score.value == 0.0 and "FAIL" in rollout.score.feedback
