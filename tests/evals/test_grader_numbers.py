"""Number normalisation (issue 30): thousands separators, the decimal-comma rule, ambiguous forms, symbols.

Every expected verdict is worked out by hand from what the string means (docs/grading.md, "Numbers"); the sweep
at the end checks that normalisation never maps two different numbers to the same string."""

import random
from fractions import Fraction

import pytest

pytest.importorskip("math_verify")

from harness.evals.math_grader import answer_readings, grade_math, normalize_answer

# (prediction inside \boxed{}, gold, expected verdict)
ISSUE_CASES = [
    (r"32,\! 349", "32349", True),  # 1. ",\!" then a space is still a thousands separator
    (r"11,\! 111,\! 111,\! 100", "11111111100", True),
    ("0.111", "0,111", True),  # 2. "0,111" is the decimal 0.111, never the integer 111
    ("0,125", "125", False),
    ("1.22", "1,22", True),  # a decimal comma, not the pair (1, 22)
    (r"2\mathrm{e}", "2", False),  # 3. \mathrm{e} is Euler's e, not a unit to drop
]

NUMBER_CASES = [
    (r"32,\!349", "32349", True),  # ",\!" without the space
    (r"1,\!000,\!000", "10^6", True),
    (r"32,\! 349", "32,349", True),
    ("32, 349", "32349", False),  # a comma and a plain space separate two items: the list 32, 349
    (r"12\,345", "12345", True),  # thin space (SI); math-verify alone reads 1\,234 as 235
    (r"1\,234", "235", False),
    ("1 234", "1234", True),  # plain spaces between 3-digit groups (math-verify alone: 235)
    (r"x = 12\;345", "12345", True),
    (r"10{,}000", "10000", True),
    ("10,000", "10000", True),
    ("1,234.5", "1234.5", True),
    ("1,234", "1234", True),  # a plain 1-3 digit lead and 3-digit groups: thousands (English convention)
    ("1,234", "1.234", False),  # ... and only thousands: never also the decimal 1.234
    ("1.234", "1,234", False),
    ("0,5", r"\frac{1}{2}", True),  # a first group of 0 is never thousands: decimal comma
    ("0,5", "5", False),
    ("-0,5", r"-\frac{1}{2}", True),  # math-verify alone reads -0,5 as the set {0, 5}
    ("0,111", "111", False),
    ("0,125", "0.125", True),
    ("0,125", "0,125", True),
    (r"3{,}14", "3.14", True),  # {,} that is not a thousands separator is LaTeX's decimal comma
    (r"1{,}5", "15", False),  # (the old normalisation deleted {,} and called this 15)
    (r"0{,}125", "125", False),
    ("12,5", "12.5", True),
    # a compact a,b is the decimal a.b or the list a, b; the other side's kind decides (a number never equals a
    # two-item list, so at most one reading can match)
    ("22, 1", "1,22", True),
    ("1.22", "1,22", True),
    ("1, 2", "1,2", True),
    ("1.2", "1,2", True),
    ("1.3", "1,2", False),
    # both compact: right only if right under both readings
    ("2,1", "1,2", False),  # the lists agree, the decimals 2.1 and 1.2 do not
    ("1,20", "1,2", False),  # the decimals agree, the lists {1, 20} and {1, 2} do not
    ("1,2", "1,2", True),
    ("025", "25", True),  # unchanged rules
    ("27", "27.0", True),
]

SYMBOL_CASES = [
    (r"2\mathrm{e}", "2e", True),
    (r"\mathrm{e}^{2}", "e^{2}", True),
    (r"1-\frac{1}{\mathrm{e}}", "1-e^{-1}", True),
    (r"1+\frac{1}{\mathrm{e}}", r"1-\frac{1}{\mathrm{e}}", False),
    (r"3+2\mathrm{i}", "3+2i", True),
    (r"3+2\mathrm{i}", "5", False),  # math-verify alone reads 3+2\mathrm{i} as 3+2
    (r"2\mathrm{i}", "2", False),
    (r"2\mathrm{d}", "2", False),  # math-verify drops a trailing d as the unit "day"
    (r"\pi\mathrm{e}", r"e\pi", True),
    (r"{\rm e}^{2}", "e^{2}", True),
    (r"\operatorname{e}", "e", True),
    (r"2\mathit{e}", "2", False),
    (r"\frac{\mathrm{d}y}{\mathrm{d}x}", r"\frac{dy}{dx}", True),
]


@pytest.mark.parametrize("pred,gold,expected", ISSUE_CASES + NUMBER_CASES + SYMBOL_CASES)
def test_verdicts(pred, gold, expected):
    v = grade_math(f"So the answer is $\\boxed{{{pred}}}$.", gold)
    assert v.correct is expected, (pred, gold, v)


@pytest.mark.parametrize(
    "raw,norm",
    [
        (r"32,\! 349", "32349"),
        (r"11,\! 111,\! 111,\! 100", "11111111100"),
        (r"x = 32,\! 349", "x = 32349"),
        (r"(1{,}000, 2)", "(1000, 2)"),
        (r"1\,000", "1000"),
        ("1 000 000", "1000000"),
        ("$1,234$", "1234"),
        ("0,111", "0,111"),  # kept: grade_math reads it both ways
        ("0,125", "0,125"),
        ("-0,5", "-0,5"),
        (r"3{,}14", "3.14"),
        (r"1{,}5", "1.5"),
        (r"0{,}5", "0.5"),
        ("12,34,56", "12,34,56"),  # not a number form: math-verify's business
        (r"2\mathrm{e}", "2e"),
        (r"\pi\mathrm{e}", r"\pi{e}"),  # braces: \pie would be a command
        (r"2\mathrm{d}", "2{d}"),
        (r"\int x\,\mathrm{d}x", r"\int x\,dx"),
        (r"\mathrm{e}", "e"),
        (r"{\rm i}", "i"),
        (r"\mathrm{m}", r"\mathrm{m}"),  # only e, i, d: single-letter units stay units
    ],
)
def test_normalize(raw, norm):
    assert normalize_answer(raw) == norm


def test_readings():
    assert answer_readings("1,22") == ["1.22", "1, 22"]
    assert answer_readings("-0,5") == ["-0.5", "-0, 5"]
    assert answer_readings("1234") == ["1234"]
    assert answer_readings("1, 22") == ["1, 22"]
    assert answer_readings("1,2,3") == ["1,2,3"]


# --------------------------------------------------------------------------------------------------
# Property: normalisation never maps two different numbers to the same string.


def _groups(n: int, sep: str) -> str:
    return f"{n:,}".replace(",", sep)


def _integer_forms(n: int) -> list[str]:
    """Ways to write the integer n >= 0 that the documented rules read as n (by construction)."""
    s = str(n)
    forms = [s, "0" + s, "00" + s, s + ".0", s + ".00", f"${s}$"]
    if n >= 1000:
        forms += [_groups(n, sep) for sep in (",", "{,}", ",\\!", ",\\! ", "\\,", "\\ ", " ", "~")]
    return forms


def _decimal_forms(whole: int, digits: str) -> list[str]:
    """Ways to write whole.digits; a comma form is only a decimal comma where it cannot be thousands."""
    forms = [f"{whole}.{digits}"]
    if whole == 0 or len(digits) != 3 or whole >= 1000:
        forms += [f"{whole},{digits}", f"{whole}{{,}}{digits}"]
    if whole >= 1000:
        forms += [_groups(whole, ",") + "." + digits, _groups(whole, "\\,") + "." + digits]
    return forms


def _sweep() -> list[tuple[str, Fraction]]:
    rng = random.Random(30)
    items: list[tuple[str, Fraction]] = []
    ints = list(range(0, 2500)) + [rng.randrange(10**3, 10**13) for _ in range(400)]
    for n in ints:
        for f in _integer_forms(n):
            items.append((f, Fraction(n)))
            if n:
                items.append(("-" + f if not f.startswith("$") else f"$-{f[1:]}", Fraction(-n)))
    wholes = list(range(0, 40)) + [rng.randrange(10**3, 10**7) for _ in range(60)]
    for whole in wholes:
        for k in (1, 2, 3, 4):
            for _ in range(6):
                digits = f"{rng.randrange(10**k):0{k}d}"
                value = whole + Fraction(int(digits), 10**k)
                for f in _decimal_forms(whole, digits):
                    items.append((f, value))
                    items.append(("-" + f, -value))
    return items


def test_normalisation_never_maps_two_numbers_to_one_string():
    items = _sweep()
    assert len(items) > 40_000
    seen: dict[str, tuple[str, Fraction]] = {}
    for raw, value in items:
        norm = normalize_answer(raw)
        other = seen.setdefault(norm, (raw, value))
        assert other[1] == value, f"{raw!r} ({value}) and {other[0]!r} ({other[1]}) both normalise to {norm!r}"
        assert normalize_answer(norm) == norm, (raw, norm)  # idempotent: a prepared gold stays what it is


def test_grader_never_accepts_a_different_number_in_the_ambiguous_families():
    """The forms that collide by a factor of 1000 or by a lost leading 0, graded through math-verify."""
    rng = random.Random(7)
    pairs = []
    for _ in range(12):
        a, b = rng.randrange(1, 1000), rng.randrange(100, 1000)
        pairs += [
            (f"{a},{b:03d}", str(a * 1000 + b), True),
            (f"{a},{b:03d}", f"{a}.{b:03d}", False),
            (f"0,{b:03d}", str(b), False),
            (f"0,{b:03d}", f"0.{b:03d}", True),
            (f"{a}{{,}}{b:03d}", str(a * 1000 + b), True),
        ]
    for pred, gold, expected in pairs:
        assert grade_math(f"\\boxed{{{pred}}}", gold).correct is expected, (pred, gold)


@pytest.mark.parametrize("gold", [float("nan"), None, "", "  "])
def test_a_missing_gold_grades_nothing_correct(gold):
    """Issue 29 item 12: a NaN gold (an empty cell read by pandas) graded '\\boxed{nan}' correct."""
    for response in ("\\boxed{nan}", "\\boxed{5}", "\\boxed{}"):
        verdict = grade_math(response, gold)
        assert not verdict.correct and verdict.reason == "bad_gold"
