"""Entropy-control harness: the public method API.

    import harness
    harness.list_methods()
    m = harness.get_method("kl_cov", k_ratio=2e-3)
"""
