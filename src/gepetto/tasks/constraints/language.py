"""IFEval `language:response_language`: the answer's language.

Own heuristic: Unicode scripts, then common function words for Latin script, and marker words to tell apart
languages that share a script (Hindi / Marathi / Nepali, Russian / Bulgarian)."""

from __future__ import annotations

import re
from collections import Counter

from ._text import _script, words
from .registry import CheckResult, constraint

LANGUAGE_NAMES = {
    "en": "English", "de": "German", "fr": "French", "es": "Spanish", "it": "Italian", "pt": "Portuguese",
    "nl": "Dutch", "fi": "Finnish", "sw": "Swahili", "vi": "Vietnamese", "tr": "Turkish", "pl": "Polish",
    "id": "Indonesian", "ru": "Russian", "bg": "Bulgarian", "uk": "Ukrainian", "ar": "Arabic", "fa": "Persian",
    "ur": "Urdu", "hi": "Hindi", "mr": "Marathi", "ne": "Nepali", "bn": "Bengali", "pa": "Punjabi",
    "gu": "Gujarati", "ta": "Tamil", "te": "Telugu", "kn": "Kannada", "ml": "Malayalam", "th": "Thai",
    "ko": "Korean", "ja": "Japanese", "zh": "Chinese", "el": "Greek", "he": "Hebrew",
}

_SCRIPT_OF = {
    "ru": "CYRILLIC", "bg": "CYRILLIC", "uk": "CYRILLIC", "ar": "ARABIC", "fa": "ARABIC", "ur": "ARABIC",
    "hi": "DEVANAGARI", "mr": "DEVANAGARI", "ne": "DEVANAGARI", "bn": "BENGALI", "pa": "GURMUKHI",
    "gu": "GUJARATI", "ta": "TAMIL", "te": "TELUGU", "kn": "KANNADA", "ml": "MALAYALAM", "th": "THAI",
    "ko": "HANGUL", "ja": "CJK", "zh": "CJK", "el": "GREEK", "he": "HEBREW",
}

_FUNCTION_WORDS = {
    "en": "the and of to is in that it for was on are with as this be not have you they at by from",
    "de": "der die und das ist nicht ein eine zu den mit sich des auf für im dem auch es sie ich wir",
    "fr": "le la les et des est une un du en que qui dans pour pas sur au avec il elle nous vous ce",
    "es": "el la los las y de que en es un una por con para no se del al lo como más pero su",
    "it": "il la di che e è un una per non con del della sono le gli si anche ma come nel alla",
    "pt": "o a os as e de que em um uma para com não do da no na se por mais ao é são",
    "nl": "de het een en van is dat niet op te zijn voor met die ik je er maar ook als",
    "fi": "ja on ei se että oli hän mutta kun niin myös ovat tai joka ole kuin mitä jos tämä",
    "sw": "na ya wa kwa ni la za katika hii kwamba lakini kama si yake mimi wewe huu ndani cha",
    "vi": "và của là không có các những được trong cho một người với này đã khi để đến",
    "tr": "ve bir bu da de için ile çok ne daha gibi olarak ama en o var değil",
    "pl": "i w nie na że się z do to jest jak ale o co po tak dla od",
    "id": "dan yang di itu dengan untuk tidak ini dari dalam akan pada juga ke ada",
}
_FW_SETS = {lang: set(ws.split()) for lang, ws in _FUNCTION_WORDS.items()}


def _script_shares(text: str) -> Counter:
    counts = Counter(_script(ch) for ch in text if ch.isalpha())
    return counts


def _latin_guess(text: str) -> tuple[str, dict[str, int]]:
    toks = [w.lower() for w in words(text)]
    scores = {lang: sum(1 for t in toks if t in fw) for lang, fw in _FW_SETS.items()}
    best = max(scores, key=lambda k: scores[k])
    return best, scores


_MARKERS = {  # distinguishing words within a shared script
    "hi": {"है", "हैं", "और", "के", "की", "में", "से", "यह", "नहीं", "था"},
    "mr": {"आहे", "आणि", "आहेत", "हे", "च्या", "मध्ये", "नाही", "होते", "ही", "या"},
    "ne": {"छ", "छन्", "र", "को", "मा", "हो", "पनि", "गर्न", "थियो", "यो"},
    "ru": {"что", "это", "этот", "который", "которая", "был", "была", "были", "так", "как", "если", "он", "она"},
    "bg": {"че", "това", "тази", "този", "която", "който", "ще", "са", "бяха", "беше", "като", "ако", "е"},
}
_FAMILIES = (("hi", "mr", "ne"), ("ru", "bg"))


@constraint("language:response_language", required=("language",),
            describe=lambda k: (
                f"Write the entire answer in {LANGUAGE_NAMES.get(str(k.get('language')), k.get('language'))}, "
                "no other language"))
def check_response_language(response: str, *, language: str) -> CheckResult:
    lang = str(language).strip().lower()
    name = LANGUAGE_NAMES.get(lang, lang)
    shares = _script_shares(response)
    total = sum(shares.values())
    if total == 0:
        return False, f"the answer has no letters, so it is not in {name}"
    if lang in _SCRIPT_OF:
        script = _SCRIPT_OF[lang]
        have = shares.get(script, 0) + (shares.get("KANA", 0) if lang == "ja" else 0)
        if lang == "ja" and shares.get("KANA", 0) == 0:
            have = 0
        frac = have / total
        if frac < 0.7:
            return False, (f"only {frac:.0%} of the letters are in the {script.title()} script used by {name}; "
                           f"the answer must be written entirely in {name}")
        if lang == "zh" and shares.get("KANA", 0) > 0.05 * total:
            return False, "the answer contains Japanese kana; it must be written in Chinese"
        toks = set(re.split(r"[\s\u0964\u0965,.!?;:\"'()\[\]]+", response))
        toks = {t.lower() for t in toks}
        for family in _FAMILIES:
            if lang in family:
                hits = {k: len(toks & _MARKERS[k]) for k in family}
                other = max((k for k in hits if k != lang), key=lambda k: hits[k])
                if hits[other] >= 2 and hits[lang] * 2 < hits[other]:
                    return False, f"the answer looks like {LANGUAGE_NAMES[other]}, not {name}"
        if lang in ("ru", "bg"):
            text = response.lower()
            ru_hits = sum(text.count(c) for c in "ыэё")
            bg_hits = text.count("ъ")
            if lang == "bg" and ru_hits > 2:
                return False, "the answer uses the letters ы/э/ё, which Russian has and Bulgarian does not"
            if lang == "ru" and bg_hits >= 2 and ru_hits == 0:
                return False, "the answer looks like Bulgarian (many ъ, no ы/э), not Russian"
        return True, f"{frac:.0%} of the letters are in the {script.title()} script of {name}"
    # Latin-script languages
    frac = shares.get("LATIN", 0) / total
    if frac < 0.7:
        return False, f"only {frac:.0%} of the letters are Latin letters; the answer must be written in {name}"
    if lang not in _FW_SETS:
        return True, f"{frac:.0%} of the letters are Latin letters (no finer check for {name})"
    best, scores = _latin_guess(response)
    if scores[best] == 0:
        return len(words(response)) < 5, f"too few common {name} words to tell the language"
    if best != lang and scores[best] > scores[lang] * 1.2:
        return False, (f"the answer reads as {LANGUAGE_NAMES.get(best, best)} ({scores[best]} common "
                       f"{LANGUAGE_NAMES.get(best, best)} words vs {scores[lang]} {name} words); it must be in {name}")
    return True, f"the answer reads as {name}"
