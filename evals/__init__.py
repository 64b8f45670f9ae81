"""Evaluation: benchmark suites, generation engines (HF, vLLM), math/code graders, metrics, lm-eval bridge.

from harness.evals.suites import get_suite, list_suites
from harness.evals.math_grader import grade_math, grade_math_many
from harness.evals.sandbox import Sandbox
from harness.evals.code_grader import grade_code_many
from harness.evals.evaluate import evaluate, score_suite
"""
