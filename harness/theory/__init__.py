"""Theory lab: exact (closed-form expectation) experiments on softmax policies that test the numbered claims of
"A Comparative Theoretical Analysis of Entropy Control Methods" and the covariance theorems of Cui et al. 2025.

Run ``harness theory --out DIR``; see docs/theory.md.
"""
