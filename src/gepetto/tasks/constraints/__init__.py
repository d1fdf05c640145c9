"""Verifiable-constraint checkers for the instruction-following tasks (IFEval and IFBench instruction ids).

Written for gepetto from the meaning of each constraint (the upstream verifier code is not used). Every
supported instruction id maps to a checker `check(response, **kwargs) -> (ok, why)`, where `why` says
concretely what was counted and what was required, and to a human sentence from `describe(id, kwargs)`.

Conventions (stated here because the benchmarks leave them open):
- words are runs of letters/digits (apostrophes and hyphens inside a word keep it one word);
- sentences end at `.`, `!`, `?` or `…` followed by a space, or at a line break (common abbreviations such as
  "e.g." and "Mr." and single-letter initials do not end a sentence);
- keyword matching is case-insensitive and on whole words;
- numeric kwargs given as floats (IFBench writes `5.0`) are treated as integers, and None-valued kwargs are dropped.

`UNSUPPORTED` lists the instruction ids with no checker (they need world knowledge or a part-of-speech tagger);
`check_all` reports them as not checked instead of guessing.

Layout: `registry` holds the `Constraint` table (`REGISTRY`), the `constraint` decorator and the functions over the
table (`check`, `check_all`, `describe`, `is_supported`, `clean_kwargs`); `_text` holds the text helpers the
checkers share (words, sentences, counting and comparing). Each instruction-id family has its own module, where
every checker is registered by a `@constraint(id, required=..., describe=...)` line directly above it:
IFEval's `change_case`, `combination`, `detectable_content`, `detectable_format`, `keywords`, `language`,
`length_constraints`, `punctuation` and `startend`; IFBench's `ifbench_count`, `ifbench_custom`, `ifbench_format`,
`ifbench_ratio`, `ifbench_repeat`, `ifbench_sentence` and `ifbench_words`. Importing the package imports every
family, so the registry is complete; a new constraint goes in its family's module, next to the similar ones.
"""

from __future__ import annotations

from ._text import alpha_words, paragraphs_by_blank_lines, sentences, words
from .registry import (
    DESCRIBERS,
    REGISTRY,
    UNSUPPORTED,
    UNSUPPORTED_REASONS,
    Checker,
    CheckResult,
    Constraint,
    Describer,
    check,
    check_all,
    clean_kwargs,
    constraint,
    describe,
    is_supported,
    register,
)

# The families register their checkers as they are imported, so this order (instruction ids: IFEval's, then
# IFBench's) is the order of REGISTRY; keep it out of import sorting.
# isort: off
from .change_case import check_capital_word_frequency, check_english_capital, check_english_lowercase
from .combination import check_repeat_prompt, check_two_responses
from .detectable_content import check_number_placeholders, check_postscript
from .detectable_format import (
    check_constrained_response, check_json_format, check_multiple_sections, check_number_bullet_lists,
    check_number_highlighted_sections, check_title,
)
from .keywords import check_forbidden_words, check_keyword_frequency, check_keywords_existence, check_letter_frequency
from .language import LANGUAGE_NAMES, check_response_language
from .length_constraints import (
    check_nth_paragraph_first_word, check_number_paragraphs, check_number_sentences, check_number_words,
)
from .punctuation import check_no_comma
from .startend import check_end_checker, check_quotation
from .ifbench_count import (
    PERSON_NAMES, check_conjunctions, check_keywords_multiple, check_numbers, check_person_names, check_pronouns,
    check_punctuation, check_unique_word_count, check_word_count_range, check_words_japanese,
)
from .ifbench_custom import (
    check_character_reverse, check_csv_city, check_csv_quotes, check_csv_special_character, check_date_format_list,
    check_mcq_count_length, check_multiples, check_reverse_newline, check_sentence_alphabet, check_word_reverse,
)
from .ifbench_format import (
    check_emoji, check_line_indent, check_list_sep, check_newline, check_no_bullets_bullets, check_no_whitespace,
    check_options, check_output_template, check_parentheses, check_quote_unquote, check_quotes, check_sub_bullets,
    check_thesis, check_title_case,
)
from .ifbench_ratio import (
    check_overlap, check_sentence_balance, check_sentence_type, check_sentence_words, check_stop_words,
)
from .ifbench_repeat import check_repeat_change, check_repeat_simple, check_repeat_span
from .ifbench_sentence import check_alliteration_increment, check_sentence_increment, check_sentence_keyword
from .ifbench_words import (
    check_consonants, check_keywords_specific_position, check_last_first, check_no_consecutive,
    check_odd_even_syllables, check_palindrome, check_paragraph_last_first, check_prime_lengths, check_repeats,
    check_vowel, check_words_alphabet, check_words_position, syllables,
)
# isort: on

__all__ = [
    "DESCRIBERS",
    "LANGUAGE_NAMES",
    "PERSON_NAMES",
    "REGISTRY",
    "UNSUPPORTED",
    "UNSUPPORTED_REASONS",
    "CheckResult",
    "Checker",
    "Constraint",
    "Describer",
    "alpha_words",
    "check",
    "check_all",
    "check_alliteration_increment",
    "check_capital_word_frequency",
    "check_character_reverse",
    "check_conjunctions",
    "check_consonants",
    "check_constrained_response",
    "check_csv_city",
    "check_csv_quotes",
    "check_csv_special_character",
    "check_date_format_list",
    "check_emoji",
    "check_end_checker",
    "check_english_capital",
    "check_english_lowercase",
    "check_forbidden_words",
    "check_json_format",
    "check_keyword_frequency",
    "check_keywords_existence",
    "check_keywords_multiple",
    "check_keywords_specific_position",
    "check_last_first",
    "check_letter_frequency",
    "check_line_indent",
    "check_list_sep",
    "check_mcq_count_length",
    "check_multiple_sections",
    "check_multiples",
    "check_newline",
    "check_no_bullets_bullets",
    "check_no_comma",
    "check_no_consecutive",
    "check_no_whitespace",
    "check_nth_paragraph_first_word",
    "check_number_bullet_lists",
    "check_number_highlighted_sections",
    "check_number_paragraphs",
    "check_number_placeholders",
    "check_number_sentences",
    "check_number_words",
    "check_numbers",
    "check_odd_even_syllables",
    "check_options",
    "check_output_template",
    "check_overlap",
    "check_palindrome",
    "check_paragraph_last_first",
    "check_parentheses",
    "check_person_names",
    "check_postscript",
    "check_prime_lengths",
    "check_pronouns",
    "check_punctuation",
    "check_quotation",
    "check_quote_unquote",
    "check_quotes",
    "check_repeat_change",
    "check_repeat_prompt",
    "check_repeat_simple",
    "check_repeat_span",
    "check_repeats",
    "check_response_language",
    "check_reverse_newline",
    "check_sentence_alphabet",
    "check_sentence_balance",
    "check_sentence_increment",
    "check_sentence_keyword",
    "check_sentence_type",
    "check_sentence_words",
    "check_stop_words",
    "check_sub_bullets",
    "check_thesis",
    "check_title",
    "check_title_case",
    "check_two_responses",
    "check_unique_word_count",
    "check_vowel",
    "check_word_count_range",
    "check_word_reverse",
    "check_words_alphabet",
    "check_words_japanese",
    "check_words_position",
    "clean_kwargs",
    "constraint",
    "describe",
    "is_supported",
    "paragraphs_by_blank_lines",
    "register",
    "sentences",
    "syllables",
    "words",
]
