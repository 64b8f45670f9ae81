"""Metrics pinned against values worked out by hand."""

import math

import pytest

from harness.evals.metrics import majority_correct, mean_and_stderr, pass_at_k, summarize


@pytest.mark.parametrize(
    "n,c,k,expected",
    [
        (4, 2, 2, 1 - 1 / 6),  # 1 - C(2,2)/C(4,2)
        (4, 2, 1, 0.5),  # pass@1 = c/n
        (10, 3, 1, 0.3),
        (5, 0, 3, 0.0),
        (3, 3, 2, 1.0),
        (4, 1, 4, 1.0),  # n - c < k
        (32, 1, 8, 1 - math.comb(31, 8) / math.comb(32, 8)),  # = 8/32
        (6, 2, 3, 1 - math.comb(4, 3) / math.comb(6, 3)),  # 1 - 4/20 = 0.8
    ],
)
def test_pass_at_k(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_rejects_k_above_n():
    with pytest.raises(ValueError, match="at least k=5"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)


def test_mean_and_stderr():
    m, se = mean_and_stderr([0.0, 1.0, 1.0, 0.0])
    assert m == 0.5
    assert se == pytest.approx(math.sqrt((4 * 0.25) / 3 / 4))  # sample var 1/3, / n
    assert mean_and_stderr([0.7]) == (0.7, 0.0)


def test_majority_over_equivalence_classes():
    assert majority_correct(["5", "5", "6"], [True, True, False])
    assert not majority_correct(["6", "5", "6"], [False, True, False])
    assert not majority_correct(["6", "5"], [False, True])  # tie: the class seen first
    assert majority_correct([None, None, "5"], [False, False, True])  # no-answer samples do not vote
    assert not majority_correct([None, None], [False, False])
    same_value = lambda a, b: float(a) == float(b)  # noqa: E731
    assert majority_correct(["0.5", "0.50", "7"], [True, True, False], same=same_value)


def test_summarize_hand_example():
    per_problem = [
        {"correct": [True, False, False, False], "answers": ["1", "2", "2", "3"]},  # maj picks "2": wrong
        {"correct": [True, True, True, False], "answers": ["4", "4", "4", None]},  # maj right
    ]
    m = summarize(per_problem)
    assert m["avg@4"] == pytest.approx((0.25 + 0.75) / 2)
    assert m["avg@4_stderr"] == pytest.approx(math.sqrt(((0.25 - 0.5) ** 2 + (0.75 - 0.5) ** 2) / 1 / 2))
    assert m["pass@4"] == 1.0
    assert m["maj@4"] == 0.5
    m2 = summarize(per_problem, k=2)
    assert m2["pass@2"] == pytest.approx(((1 - 3 / 6) + 1.0) / 2)


def test_summarize_greedy_and_errors():
    m = summarize([{"correct": [True]}, {"correct": [False]}, {"correct": [True]}])
    assert m == {"avg@1": pytest.approx(2 / 3), "avg@1_stderr": pytest.approx(math.sqrt((1 / 3) / 3))}
    with pytest.raises(ValueError, match="different sample counts"):
        summarize([{"correct": [True]}, {"correct": [True, False]}])
    with pytest.raises(ValueError):
        summarize([])


def test_maj_merges_equivalent_wrong_answers():
    pytest.importorskip("math_verify")
    from harness.evals.math_grader import merge_equivalent_answers

    # gold 3: one correct sample; "1/2" and "0.5" are the same wrong answer -> that class (2) beats "3" (1)
    per = [
        {"answers": ["3", "\\frac{1}{2}", "0.5", None], "correct": [True, False, False, False]},
        # merging cannot change this vote (2 correct vs 2 wrong strings of different values)
        {"answers": ["7", "7", "1", "2"], "correct": [True, True, False, False]},
    ]
    assert majority_correct(per[0]["answers"], per[0]["correct"])  # by strings: three classes of 1 -> first
    merge_equivalent_answers(per, workers=1)
    assert per[0]["answers"][1] == per[0]["answers"][2] != per[0]["answers"][0]
    assert not majority_correct(per[0]["answers"], per[0]["correct"])
    assert majority_correct(per[1]["answers"], per[1]["correct"])
    assert summarize(per)["maj@4"] == 0.5
