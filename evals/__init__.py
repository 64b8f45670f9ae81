"""Evaluation: benchmark suites, generation engines (HF, vLLM), math/code graders, metrics, lm-eval bridge.

from evals.suites import get_suite, list_suites
from evals.math_grader import grade_math, grade_math_many
from evals.sandbox import Sandbox
from evals.code_grader import grade_code_many
from evals.evaluate import evaluate, score_suite
"""
