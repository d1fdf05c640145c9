"""IFBench `words:*`: letter and word patterns (alphabet chains, consonant clusters, positions, syllables,
palindromes, prime lengths, repeats, vowels)."""

from __future__ import annotations

import re
from collections import Counter
from itertools import pairwise

from ._text import _count_check, _plural, _show, alpha_words, sentences, words
from .registry import CheckResult, constraint


@constraint("words:alphabet", describe="Start each word with the next letter of the alphabet (Z loops to A)")
def check_words_alphabet(response: str) -> CheckResult:
    ws = alpha_words(response)
    if len(ws) < 2:
        return False, "the answer needs several words"
    for i, (a, b) in enumerate(pairwise(ws), 2):
        want = chr((ord(a[0].lower()) - ord("a") + 1) % 26 + ord("a")) if "a" <= a[0].lower() <= "z" else None
        if want is None or b[0].lower() != want:
            return False, (f"word {i} {b!r} follows {a!r} but must start with {want.upper() if want else '?'}; "
                           "each word must start with the next letter of the alphabet")
    return True, f"{len(ws)} words follow the alphabet letter by letter"


_VOWELS = set("aeiou")


def _has_cluster(word: str) -> bool:
    w = word.lower()
    return any(a.isalpha() and b.isalpha() and a not in _VOWELS and b not in _VOWELS for a, b in pairwise(w))


@constraint("words:consonants", describe="Give every word a cluster of two consonants in a row")
def check_consonants(response: str) -> CheckResult:
    ws = alpha_words(response)
    if not ws:
        return False, "the answer has no words"
    bad = [w for w in ws if not _has_cluster(w)]
    if bad:
        return False, f"{_plural(len(bad), 'word')} have no two consonants in a row, e.g. {_show(bad)}"
    return True, "every word has a consonant cluster"


@constraint("words:keywords_specific_position", required=("keyword", "n", "m"),
            describe=lambda k: f"Make {k.get('keyword')!r} word {int(k.get('m', 1))} of sentence {int(k.get('n', 1))}")
def check_keywords_specific_position(response: str, *, keyword: str, n: int, m: int) -> CheckResult:
    sents = sentences(response)
    si, wi = int(n), int(m)
    if len(sents) < si:
        return False, (f"the answer has only {_plural(len(sents), 'sentence')}; {keyword!r} must be word {wi} "
                       f"of sentence {si}")
    ws = words(sents[si - 1])
    if len(ws) < wi or ws[wi - 1].lower() != str(keyword).lower():
        got = ws[wi - 1] if len(ws) >= wi else f"nothing (the sentence has {len(ws)} words)"
        return False, f"word {wi} of sentence {si} is {got!r}; it must be {keyword!r}"
    return True, f"{keyword!r} is word {wi} of sentence {si}"


@constraint("words:last_first", describe="Start each sentence with the last word of the previous sentence")
def check_last_first(response: str) -> CheckResult:
    sents = sentences(response)
    if len(sents) < 2:
        return False, "at least two sentences are needed"
    for i, (a, b) in enumerate(pairwise(sents), 2):
        wa, wb = words(a), words(b)
        if not wa or not wb or wa[-1].lower() != wb[0].lower():
            return False, (f"sentence {i} starts with {wb[0] if wb else ''!r} but sentence {i - 1} ends with "
                           f"{wa[-1] if wa else ''!r}; each sentence must start with the last word of the previous one")
    return True, f"all {len(sents)} sentences chain last word to first word"


@constraint("words:no_consecutive", describe="Never let two consecutive words start with the same letter")
def check_no_consecutive(response: str) -> CheckResult:
    ws = alpha_words(response)
    pairs = [(a, b) for a, b in pairwise(ws) if a[0].lower() == b[0].lower()]
    if not ws:
        return False, "the answer has no words"
    if pairs:
        shown = ", ".join(f"'{a} {b}'" for a, b in pairs[:4])
        return False, f"{_plural(len(pairs), 'pair')} of consecutive words share a first letter: {shown}"
    return True, "no two consecutive words share a first letter"


def syllables(word: str) -> int:
    """A rough English syllable count: vowel groups, minus a silent final e."""
    w = word.lower()
    groups = re.findall(r"[aeiouy]+", w)
    n = len(groups)
    if w.endswith("e") and not w.endswith(("le", "ee", "ye")) and n > 1:
        n -= 1
    return max(n, 1)


@constraint("words:odd_even_syllables", describe="Alternate words with odd and even numbers of syllables")
def check_odd_even_syllables(response: str) -> CheckResult:
    ws = alpha_words(response)
    if len(ws) < 2:
        return False, "the answer needs several words"
    parities = [syllables(w) % 2 for w in ws]
    for i in range(1, len(ws)):
        if parities[i] == parities[i - 1]:
            return False, (f"{ws[i - 1]!r} ({syllables(ws[i - 1])} syllables) and {ws[i]!r} ({syllables(ws[i])}) "
                           "are both odd or both even; odd and even syllable counts must alternate")
    return True, f"{len(ws)} words alternate odd and even syllable counts (estimated)"


@constraint("words:palindrome", describe="Include at least 10 different palindrome words of 5 or more letters")
def check_palindrome(response: str) -> CheckResult:
    found = sorted({w.lower() for w in alpha_words(response) if len(w) >= 5 and w.lower() == w.lower()[::-1]})
    return _count_check(len(found), "at least", 10, "different palindrome", "the answer",
                        f"of 5+ letters: {_show(found)}" if found else "of 5+ letters")


@constraint("words:paragraph_last_first", describe="End each paragraph (one per line) with the word it starts with")
def check_paragraph_last_first(response: str) -> CheckResult:
    paras = [p for p in response.strip().splitlines() if words(p)]
    if not paras:
        return False, "the answer is empty"
    for i, p in enumerate(paras, 1):
        ws = words(p)
        if ws[0].lower() != ws[-1].lower():
            return False, f"paragraph {i} starts with {ws[0]!r} but ends with {ws[-1]!r}; they must be the same word"
    return True, f"all {_plural(len(paras), 'paragraph')} end with the word they start with"


_PRIMES = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31}


@constraint("words:prime_lengths", describe="Use only words whose length is a prime number")
def check_prime_lengths(response: str) -> CheckResult:
    ws = alpha_words(response)
    if not ws:
        return False, "the answer has no words"
    bad = [w for w in ws if len(w) not in _PRIMES]
    if bad:
        return False, f"{_plural(len(bad), 'word')} have a length that is not prime, e.g. {_show(bad)}"
    return True, "every word has a prime number of letters"


@constraint("words:repeats", required=("small_n",),
            describe=lambda k: f"Use no word more than {int(k.get('small_n', 1))} times")
def check_repeats(response: str, *, small_n: int) -> CheckResult:
    c = Counter(w.lower() for w in words(response))
    over = [(w, n) for w, n in c.most_common() if n > int(small_n)]
    if over:
        shown = ", ".join(f"{w!r} {n}x" for w, n in over[:5])
        return False, f"words repeated more than {int(small_n)} times: {shown}"
    return True, f"no word appears more than {int(small_n)} times"


@constraint("words:vowel", describe="Use at most three different vowels in the whole answer")
def check_vowel(response: str) -> CheckResult:
    used = sorted({ch for ch in response.lower() if ch in _VOWELS})
    if not words(response):
        return False, "the answer has no words"
    if len(used) > 3:
        return False, f"the answer uses {len(used)} different vowels ({', '.join(used)}); at most 3 are allowed"
    return True, f"only the vowels {', '.join(used)} are used"


@constraint("words:words_position", required=("keyword",),
            describe=lambda k: f"Make {k.get('keyword')!r} the second word and the second-to-last word")
def check_words_position(response: str, *, keyword: str) -> CheckResult:
    ws = words(response)
    kw = str(keyword).lower()
    if len(ws) < 3:
        return False, "the answer is too short"
    problems = []
    if ws[1].lower() != kw:
        problems.append(f"the second word is {ws[1]!r}")
    if ws[-2].lower() != kw:
        problems.append(f"the second-to-last word is {ws[-2]!r}")
    if problems:
        return False, " and ".join(problems) + f"; both must be {keyword!r}"
    return True, f"the second and second-to-last words are {keyword!r}"
