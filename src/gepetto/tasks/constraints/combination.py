"""IFEval `combination:*`: repeat the request first, two different responses."""

from __future__ import annotations

import re

from ._text import _clip, _norm_space, _plural, words
from .registry import CheckResult, constraint


@constraint("combination:repeat_prompt", required=("prompt_to_repeat",),
            describe=lambda k: (
                f"Start by repeating the request word for word ({_clip(str(k.get('prompt_to_repeat', '')), 80)!r}), "
                "then answer"))
def check_repeat_prompt(response: str, *, prompt_to_repeat: str) -> CheckResult:
    want, got = _norm_space(prompt_to_repeat), _norm_space(response)
    if not got.startswith(want):
        common = 0
        for a, b in zip(want, got, strict=False):
            if a != b:
                break
            common += 1
        where = "at its very start" if common == 0 else f"after {common} matching characters"
        return False, (f"the answer does not begin with the request repeated word for word (it differs {where}); "
                       f"it must start with: {prompt_to_repeat.strip()[:150]!r}")
    if not words(got[len(want):]):
        return False, "the answer repeats the request but then gives no answer"
    return True, "the answer starts with the request repeated word for word, then answers it"


@constraint("combination:two_responses", describe="Give two different responses separated by six asterisks ******")
def check_two_responses(response: str) -> CheckResult:
    parts = [p.strip() for p in re.split(r"\*{6}", response)]
    if len(parts) != 2:
        n = response.count("******")
        return False, (f"the answer has {_plural(n, 'separator')} '******'; exactly one separator between two "
                       "responses is required")
    if not parts[0] or not parts[1]:
        return False, "one of the two responses around '******' is empty"
    if _norm_space(parts[0]) == _norm_space(parts[1]):
        return False, "the two responses are identical; they must be different"
    return True, "two different responses separated by '******'"
