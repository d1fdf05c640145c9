"""The constraint registry: each id's checker, description and required kwargs, registered together."""

import inspect

import pytest

from gepetto.tasks import constraints as C

KW_ONLY, VAR_KW = inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD


def test_every_id_has_a_checker_a_description_and_a_spec():
    assert len(C.REGISTRY) == 81
    assert list(C.DESCRIBERS) == list(C.REGISTRY)
    for cid, c in C.REGISTRY.items():
        family = cid.split(":")[0]
        assert c.id == cid
        assert callable(c.check) and getattr(C, c.check.__name__) is c.check  # the package exports every checker
        assert c.check.__module__.rsplit(".", 1)[1] in (family, f"ifbench_{family}")  # in its family's module
        assert callable(c.describe) and C.DESCRIBERS[cid] is c.describe
        assert isinstance(c.required, tuple) and all(isinstance(k, str) for k in c.required)


def test_the_spec_matches_the_checkers_keyword_parameters():
    for cid, c in C.REGISTRY.items():
        params = list(inspect.signature(c.check).parameters.values())
        assert params[0].name == "response", cid
        rest = params[1:]
        assert all(p.kind in (KW_ONLY, VAR_KW) for p in rest), cid
        if any(p.kind is VAR_KW for p in rest):  # count:keywords_multiple reads keyword1..keyword5 itself
            assert c.required, cid
        else:
            needed = [p.name for p in rest if p.default is p.empty]
            assert sorted(c.required) == sorted(needed), cid


def test_a_duplicate_id_is_refused_and_the_registry_is_unchanged():
    before = dict(C.REGISTRY)
    with pytest.raises(ValueError, match=r"'punctuation:no_comma' is already registered.*check_no_comma"):
        @C.constraint("punctuation:no_comma", describe="Use commas freely")
        def check_commas(response: str) -> C.CheckResult:
            return True, "fine"
    assert before == C.REGISTRY
    assert C.describe("punctuation:no_comma") == "Do not use any commas"
    assert C.check("punctuation:no_comma", "a, b")[0] is False


def test_a_registered_constraint_is_checked_and_described():
    try:
        @C.constraint("test:max_lines", required=("n",), describe=lambda k: f"Use at most {k['n']} lines")
        def check_max_lines(response: str, *, n: int) -> C.CheckResult:
            got = len(response.splitlines())
            return got <= n, f"{got} lines"

        assert check_max_lines("a", n=1) == (True, "1 lines")  # the decorator returns the checker unchanged
        assert C.is_supported("test:max_lines") and not C.is_supported("test:max_lines", {})
        assert C.check_all("a\nb\nc", ["test:max_lines", "test:max_lines"], [{"n": 2.0}, {}]) == [
            ("test:max_lines", "Use at most 2 lines", False, "3 lines"),
            ("test:max_lines", "Follow the instruction 'test:max_lines'", None,
             "not checked: test:max_lines needs the parameter(s) n"),
        ]
    finally:
        C.REGISTRY.pop("test:max_lines", None)
        C.DESCRIBERS.pop("test:max_lines", None)
    assert not C.is_supported("test:max_lines")
