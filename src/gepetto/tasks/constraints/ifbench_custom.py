"""IFBench `custom:*`: reversed text, CSV tables, date lists, multiple-choice questions, fixed outputs,
alphabetical sentences."""

from __future__ import annotations

import re
import unicodedata
from itertools import pairwise

from ._text import _first_word, _plural, _show, _strip_fences, sentences, words
from .registry import CheckResult, constraint


def _reads_forward(text: str) -> bool:
    t = text.strip()
    return bool(t) and t[0].isupper() and t[-1] in ".!?"


@constraint("custom:character_reverse", describe="Write the answer sentence reversed letter by letter")
def check_character_reverse(response: str) -> CheckResult:
    t = response.strip()
    if not words(t):
        return False, "the answer is empty"
    if _reads_forward(t):
        return False, "the answer reads normally (capital first, full stop last); it must be reversed letter by letter"
    if not _reads_forward(t[::-1]):
        return False, ("read backwards letter by letter the answer should be a normal sentence (starting with a "
                       "capital letter and ending with . ! or ?), but it is not")
    return True, f"reversed letter by letter the answer reads: {t[::-1][:80]!r}"


def _csv_rows(response: str) -> list[str]:
    body = _strip_fences(response)
    return [ln for ln in body.splitlines() if ln.strip()]


def _check_csv(response: str, *, columns: list[str], rows: int, delimiter: str, quote_all: bool,
               special: bool) -> CheckResult:
    import csv
    import io

    lines = _csv_rows(response)
    if not lines:
        return False, "the answer contains no CSV lines"
    name = "tab" if delimiter == "\t" else "comma"
    parsed = list(csv.reader(io.StringIO("\n".join(lines)), delimiter=delimiter))
    header = [h.strip() for h in parsed[0]]
    if header != columns:
        return False, (f"the first line must be the header {delimiter.join(columns)!r} ({name}-delimited); "
                       f"got {lines[0][:100]!r}")
    data = parsed[1:]
    if len(data) != rows:
        return False, f"the answer has {_plural(len(data), 'data row')} after the header; exactly {rows} are required"
    bad = [i + 2 for i, r in enumerate(data) if len(r) != len(columns)]
    if bad:
        return False, f"line(s) {_show(map(str, bad))} do not have {len(columns)} {name}-separated fields"
    if quote_all:
        for i, ln in enumerate(lines):
            fields = ln.split(delimiter)
            if not all(len(f.strip()) >= 2 and f.strip()[0] == '"' and f.strip()[-1] == '"' for f in fields):
                return False, f"line {i + 1} has a field not enclosed in double quotes: {ln[:100]!r}"
    if special:
        quoted = re.findall(r'"([^"]*)"', "\n".join(lines[1:]))
        if not any(re.search(r"[^\w\s.]", q) for q in quoted):
            return False, "no field contains a special character (such as & , / ' or -) enclosed in double quotes"
    return True, f"a {name}-delimited CSV with the header and {rows} data rows"


@constraint("custom:csv_city",
            describe="Output comma-delimited CSV with header ID,Country,City,Year,Count and exactly 7 data rows")
def check_csv_city(response: str) -> CheckResult:
    return _check_csv(response, columns=["ID", "Country", "City", "Year", "Count"], rows=7, delimiter=",",
                      quote_all=False, special=False)


@constraint("custom:csv_quotes",
            describe=(
                "Output tab-delimited CSV with header StudentID, Subject, Grade, Semester, Score and 3 data rows, "
                "every field in double quotes"))
def check_csv_quotes(response: str) -> CheckResult:
    return _check_csv(response, columns=["StudentID", "Subject", "Grade", "Semester", "Score"], rows=3,
                      delimiter="\t", quote_all=True, special=False)


@constraint("custom:csv_special_character",
            describe=("Output comma-delimited CSV with header ProductID,Category,Brand,Price,Stock and 14 data rows, "
                      "one field with a special character enclosed in double quotes"))
def check_csv_special_character(response: str) -> CheckResult:
    return _check_csv(response, columns=["ProductID", "Category", "Brand", "Price", "Stock"], rows=14,
                      delimiter=",", quote_all=False, special=True)


@constraint("custom:date_format_list", describe="Give only a comma-separated list of dates in the format YYYY-MM-DD")
def check_date_format_list(response: str) -> CheckResult:
    import datetime as dt

    items = [x.strip() for x in _strip_fences(response).strip().rstrip(".").split(",")]
    if len(items) < 2:
        return False, "the answer must be a comma-separated list of several dates (YYYY-MM-DD) and nothing else"
    bad = []
    for x in items:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", x):
            bad.append(x)
            continue
        try:
            dt.date.fromisoformat(x)
        except ValueError:
            bad.append(x)
    if bad:
        return False, f"these items are not dates in the form YYYY-MM-DD: {_show(bad)} (no explanation allowed)"
    return True, f"{len(items)} comma-separated dates, all YYYY-MM-DD (the dates themselves are not verified)"


_MCQ_OPTION_RE = re.compile(r"(?m)^[ \t]*(?:[-*][ \t]+)?\(?[A-Ea-e1-5][).:][ \t]+\S")


@constraint("custom:mcq_count_length",
            describe=("Write 4 questions starting with 'Question', 5 options each, each question longer than the "
                      "previous, no explanation"))
def check_mcq_count_length(response: str) -> CheckResult:
    starts = [m.start() for m in re.finditer(r"(?m)^[ \t#*]*Question\b", response)]
    if len(starts) != 4:
        return False, (f"the answer has {_plural(len(starts), 'line')} starting with 'Question'; "
                       "exactly 4 questions are required")
    blocks = [response[a:b] for a, b in zip(starts, [*starts[1:], len(response)], strict=True)]
    lengths = []
    for i, block in enumerate(blocks, 1):
        lines = block.splitlines()
        opts = len(_MCQ_OPTION_RE.findall("\n".join(lines[1:])))
        if opts != 5:
            return False, f"question {i} has {_plural(opts, 'option')} (lines like 'A) ...'); exactly 5 are required"
        lengths.append(len(lines[0].strip()))
    if any(b <= a for a, b in pairwise(lengths)):
        return False, f"the question lines must get longer each time; their lengths in characters are {lengths}"
    if response[starts[-1]:].strip().count("\n") > 6:
        return False, "there is extra text after the last question's options; no explanation is allowed"
    return True, f"4 questions with 5 options each, getting longer ({lengths} characters)"


@constraint("custom:multiples", describe="Print only the multiples of 7 from 10 to 50")
def check_multiples(response: str) -> CheckResult:
    nums = [int(x) for x in re.findall(r"\d+", response)]
    want = [14, 21, 28, 35, 42, 49]
    if nums != want:
        return False, f"the numbers printed are {nums[:12]}; exactly {want} (multiples of 7 from 10 to 50) are required"
    return True, "prints exactly 14, 21, 28, 35, 42, 49"


def _list_item(line: str) -> str:
    return re.sub(r"^[\s*\-•]*(?:\d+[.)]\s*)?", "", line).strip()


@constraint("custom:reverse_newline", describe="List the items in reverse alphabetical order, one per line")
def check_reverse_newline(response: str) -> CheckResult:
    items = [_list_item(ln) for ln in response.splitlines() if _list_item(ln)]
    if len(items) < 40:
        return False, f"the answer lists {_plural(len(items), 'line')}; Africa has 54 countries, one per line"
    long = [x for x in items if len(x.split()) > 6]
    if long:
        return False, f"some lines are not just a country name: {_show(long, 2)}"
    keys = [unicodedata.normalize("NFKD", x).encode("ascii", "ignore").decode().lower() for x in items]
    for i, (a, b) in enumerate(pairwise(keys), 1):
        if b > a:
            return False, f"not in reverse alphabetical order: {items[i - 1]!r} comes before {items[i]!r}"
    return True, f"{len(items)} lines in reverse alphabetical order (the country names themselves are not verified)"


@constraint("custom:sentence_alphabet",
            describe="Write 26 sentences whose first words start with A, B, C, ... Z in order")
def check_sentence_alphabet(response: str) -> CheckResult:
    sents = sentences(response)
    if len(sents) != 26:
        return False, f"the answer has {_plural(len(sents), 'sentence')}; exactly 26 are required"
    for i, s in enumerate(sents):
        letter = chr(ord("a") + i)
        first = _first_word(s)
        if not first.startswith(letter):
            return False, f"sentence {i + 1} starts with {first!r}; it must start with the letter {letter.upper()}"
    return True, "26 sentences whose first words start with A to Z in order"


@constraint("custom:word_reverse", describe="Write the answer sentence with its words in reverse order")
def check_word_reverse(response: str) -> CheckResult:
    toks = response.split()
    if not toks:
        return False, "the answer is empty"
    if _reads_forward(" ".join(toks)):
        return False, "the answer reads normally; its words must be in reverse order"
    back = " ".join(reversed(toks))
    if not _reads_forward(back):
        return False, ("read backwards word by word the answer should be a normal sentence (first word "
                       "capitalised, last word ending with . ! or ?), but it is not")
    if any(tok != tok[::-1] and _reads_forward(tok[::-1]) and len(tok) > 3 for tok in toks[:1]):
        return False, "the letters of the words are reversed too; only the word order must be reversed"
    return True, f"reversed word by word the answer reads: {back[:80]!r}"
