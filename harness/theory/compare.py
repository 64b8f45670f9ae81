"""Section VII claims: update structure and variance, convergence, unbiasedness, stability margin, cost."""

from __future__ import annotations

import math
import time

import numpy as np
import torch

import harness

from . import methods as M
from .claim import claim
from .covmethods import Population, vanilla_step
from .softmax import (
    advantage,
    cov_pi,
    entropy,
    entropy_grad,
    fit_order,
    kl,
    largest_remainder_counts,
    logp,
    probs,
    random_bandit,
    t,
)


def batch_dz(m, z, z_old, actions, adv, *, step=0, generator=None, entropy_coef=False, with_frac=False):
    """Logit-gradient descent direction of the method's own loss on a (1, N) batch of one state's tokens
    (and, with ``with_frac``, the fraction of tokens the method selected)."""
    zz = z.clone().requires_grad_(True)
    lp = logp(zz)[actions][None, :]
    old = logp(z_old)[actions][None, :]
    mask = torch.ones_like(lp)
    ent = entropy(zz).expand_as(lp) if entropy_coef else None
    sel = m.selection_plan(lp.detach(), old, adv, mask, generator=generator)
    out = m.policy_loss(lp, old, adv, mask, entropy=ent, step=step, generator=generator, selected=sel)
    (g,) = torch.autograd.grad(out.loss, zz)
    if with_frac:
        return -g, (float(sel.float().mean()) if sel is not None else 0.0)
    return -g


def update_stats(seed: int, batches: int, n_tok: int, k: int = 20) -> dict:
    """One bandit instance: Monte Carlo (common random numbers) of each method's logit update at an off-policy point."""
    g = np.random.default_rng(seed)
    z_old = t(g.normal(0, 1.5, k))
    r = t(g.uniform(0, 1, k))
    z = z_old + 0.3 * advantage(z_old, r) / advantage(z_old, r).std()  # second mini-batch step: off-policy
    methods = {
        "pg": M.get("kl_cov", k_ratio=1e-9, beta=0.0),
        "entropy_reg": harness.get_method("entropy_bonus", coef=0.05, eps_low=1e3, eps_high=1e3),  # no clip
        "clip_cov": M.get("clip_cov", clip_ratio=0.02, lb=1.0, ub=5.0, eps=1.0),
        "kl_cov": M.get("kl_cov", k_ratio=0.02, beta=1.0),
    }
    ups = {name: [] for name in methods}
    tok_frac = {name: [] for name in methods}
    p_old = probs(z_old)
    for b in range(batches):
        acts = torch.as_tensor(g.choice(k, size=n_tok, p=p_old.numpy()))
        rew = torch.as_tensor(g.random(n_tok) < r[acts].numpy(), dtype=torch.float64)
        adv = ((rew - rew.mean()) / (rew.std() + 1e-6))[None, :]
        for name, m in methods.items():
            gen = torch.Generator().manual_seed(b)
            dz, frac = batch_dz(
                m, z, z_old, acts, adv, generator=gen, entropy_coef=name == "entropy_reg", with_frac=True
            )
            ups[name].append(dz)
            if name in ("clip_cov", "kl_cov"):
                tok_frac[name].append(frac)
    ups = {n: torch.stack(v) for n, v in ups.items()}
    mean_pg, cov_pg = ups["pg"].mean(0), torch.cov(ups["pg"].T)
    res = {}
    for name, u in ups.items():
        bias = u.mean(0) - mean_pg
        dense = float((bias.abs() > 1e-3 * bias.abs().max()).float().mean()) if bias.abs().max() > 0 else 0.0
        res[name] = {
            "total_variance": float(torch.trace(torch.cov(u.T))),
            "bias_norm_vs_pg": float(bias.norm()),
            "bias_density_over_logits": dense,
            "tokens_modified_frac": float(np.mean(tok_frac[name]))
            if tok_frac[name]
            else (1.0 if name == "entropy_reg" else 0.0),
        }
    res["entropy_reg"]["max_abs(Cov_reg - Cov_pg)"] = float((torch.cov(ups["entropy_reg"].T) - cov_pg).abs().max())
    boot = np.random.default_rng(0)
    half = batches // 2
    for name in ("clip_cov", "kl_cov"):
        res[name]["variance_ratio_to_pg"] = res[name]["total_variance"] / res["pg"]["total_variance"]
        # direction where Cov_cov exceeds Cov_pg most, chosen on the first half; tested on the second half
        d = torch.cov(ups["pg"][:half].T) - torch.cov(ups[name][:half].T)
        v = torch.linalg.eigh(d).eigenvectors[:, 0]
        p2, c2 = ups["pg"][half:] @ v, ups[name][half:] @ v
        ratios, diffs = [], []
        for _ in range(400):  # bootstrap over batches (the same resample for both methods)
            idx = torch.as_tensor(boot.integers(0, batches, batches))
            ratios.append(float(torch.cov(ups[name][idx].T).trace() / torch.cov(ups["pg"][idx].T).trace()))
            j = torch.as_tensor(boot.integers(0, len(p2), len(p2)))
            diffs.append(float(p2[j].var() - c2[j].var()))  # Var_pg - Var_cov along v (Cov_reg = Cov_pg)
        res[name]["variance_ratio_95ci"] = [float(np.quantile(ratios, 0.025)), float(np.quantile(ratios, 0.975))]
        res[name]["v'(Cov_reg - Cov)v_95ci_held_out"] = [
            float(np.quantile(diffs, 0.025)),
            float(np.quantile(diffs, 0.975)),
        ]
    return res


def thm_vii1(batches: int = 200, n_tok: int = 256, seeds=(3, 4, 9)) -> dict:
    inst = {f"seed_{s}": update_stats(s, batches, n_tok) for s in seeds}
    cov_names = ("clip_cov", "kl_cov")
    not_psd = {n: sum(v[n]["v'(Cov_reg - Cov)v_95ci_held_out"][1] < 0 for v in inst.values()) for n in cov_names}
    above = {n: sum(v[n]["variance_ratio_95ci"][0] > 1 for v in inst.values()) for n in cov_names}
    below = {n: sum(v[n]["variance_ratio_95ci"][1] < 1 for v in inst.values()) for n in cov_names}
    reg_same = max(v["entropy_reg"]["max_abs(Cov_reg - Cov_pg)"] for v in inst.values())
    fails = any(not_psd.values()) or any(above.values())
    ci = lambda n: ", ".join(
        f"[{v[n]['variance_ratio_95ci'][0]:.3f}, {v[n]['variance_ratio_95ci'][1]:.3f}]" for v in inst.values()
    )
    return claim(
        "thm_vii1",
        "Structure: dtheta_reg = dtheta_pg + alpha grad H (dense bias), dtheta_cov = dtheta_pg + beta B_cov "
        "(sparse bias); Cov(dtheta_reg) - Cov(dtheta_cov) is PSD: covariance methods have variance no "
        "larger than the base PG",
        "does not hold as stated" if fails else "holds",
        {
            "K": 20,
            "tokens_per_batch": n_tok,
            "batches_per_instance": batches,
            "instances": inst,
            "instances_not_psd_beyond_noise": not_psd,
            "instances_variance_above_pg": above,
            "instances_variance_below_pg": below,
            "max_abs(Cov_reg - Cov_pg)": reg_same,
        },
        experiment=f"{len(seeds)} K=20 bandits; {batches} sampled batches of {n_tok} tokens each from pi_old with "
        "Bernoulli rewards and group-normalised advantages, evaluated at an off-policy point (one step "
        "after pi_old); logit update = -grad of each method's own harness loss (pg = kl_cov with beta 0, "
        "entropy_bonus coef 0.05 without PPO clip, clip_cov ratio 0.02 lb 1 ub 5, kl_cov k 0.02 beta 1); "
        "common random numbers across methods; 95% bootstrap intervals over batches; PSD test: the direction "
        "of most negative Cov(reg) - Cov(cov) is chosen on half of the batches and the variance "
        "difference along it is tested on the other half",
        supported="the decomposition holds: entropy regularisation adds a deterministic, dense shift, so its "
        "update variance equals PG's exactly. The covariance methods' bias is sparse in tokens (about 2% "
        "here) but dense over logits: each token's gradient (e_y - pi) moves every logit. Their variance "
        "is not ordered with PG's at an off-policy (second) update: total variance / PG (95% CI per "
        f"instance) Clip-Cov {ci('clip_cov')}, KL-Cov {ci('kl_cov')}; Cov(reg) - Cov(cov) has a direction of "
        f"negative variance difference (held-out 95% CI below 0) in {not_psd['clip_cov']} (Clip-Cov) and "
        f"{not_psd['kl_cov']} (KL-Cov) of "
        f"{len(seeds)} instances, so it is not PSD. On the first, on-policy update KL-Cov equals PG exactly"
        if fails
        else None,
    )


def mei_smoothness(k: int, alpha: float) -> float:
    """Smoothness constants for a softmax bandit with r in [0,1] (Mei et al. 2020): J 5/2, H 4 + 8 log K."""
    return 2.5 + alpha * (4 + 8 * math.log(k))


def thm_vii2(steps: int = 400) -> dict:
    rows = []
    for k, alpha, seed in ((10, 0.1, 0), (10, 0.01, 1), (50, 0.05, 2), (50, 0.0, 3)):
        z, r = random_bandit(k, seed=seed)
        lsmooth = mei_smoothness(k, alpha)
        eta = 1.0 / lsmooth
        j_star = alpha * torch.logsumexp(r / alpha, 0) if alpha > 0 else r.max()
        j0 = float((probs(z) * r).sum() + alpha * entropy(z))
        gaps0 = float(j_star) - j0
        best, worst_ratio, hess_max = float("inf"), 0.0, 0.0
        for step in range(1, steps + 1):
            grad = probs(z) * advantage(z, r) + alpha * entropy_grad(z)
            best = min(best, float(grad.norm() ** 2))
            bound = 2 * gaps0 / (eta * step)
            worst_ratio = max(worst_ratio, best / bound)
            if step % 50 == 1:
                f = lambda x: (probs(x) * r).sum() + alpha * entropy(x)
                hess_max = max(
                    hess_max, float(torch.linalg.eigvalsh(torch.autograd.functional.hessian(f, z)).abs().max())
                )
            z = z + eta * grad
        rows.append(
            {
                "K": k,
                "alpha": alpha,
                "L": lsmooth,
                "eta=1/L": eta,
                "J*_reg - J_reg(theta0)": gaps0,
                "max_T min_t|grad|^2 / bound": worst_ratio,
                "max |Hessian| seen": hess_max,
            }
        )
    ok = all(x["max_T min_t|grad|^2 / bound"] <= 1.0 for x in rows)
    return claim(
        "thm_vii2",
        "min_{t<T} ||grad J_reg(theta_t)||^2 <= 2 (J_reg(theta_0) - J*_reg) / (eta T) for eta <= 1/L",
        "holds under conditions" if ok else "does not hold as stated",
        {"runs": rows, "steps": steps},
        experiment="exact gradient ascent on J + alpha H for bandits (K=10, 50; alpha 0..0.1) with eta = 1/L, "
        "L = 5/2 + alpha (4 + 8 log K) (smoothness of softmax J and H, Mei et al. 2020); ratio of the "
        "best squared gradient norm so far to the bound, maximised over T = 1..400; Hessian norms seen "
        "along the path (float64 autograd) stay below L",
        conditions="with the numerator read as J*_reg - J_reg(theta_0) (as printed it is negative for a "
        "maximisation, and no non-negative quantity is below it), eta <= 1/L with L = L_J + alpha L_H; "
        "it certifies a stationary point of J_reg, which is not a stationary point of J (thm_v2)",
        supported=None if ok else "the rate bound is violated (see runs)",
    )


def smooth_kl_step(z, z_old, r, beta):
    """Exact inner update of the paper's KL-Cov with the full KL(pi_old || pi) (all actions): expectations only."""
    p, p_old = probs(z), probs(z_old)
    a_old = advantage(z_old, r)
    return p * (a_old - (p * a_old).sum()) - beta * (p - p_old)


def run_rollouts(step_fn, z0, outer, inner):
    z, gaps = z0.clone(), []
    for step in range(outer):
        z_old = z.clone()
        for _ in range(inner):
            z = z + step_fn(z, z_old, step)
        gaps.append(z.clone())
    return gaps


def thm_vii3(outer: int = 200, inner: int = 2) -> dict:
    """Rollouts (pi_old = current policy) x inner updates; harness losses on population batches from pi_old."""
    g = np.random.default_rng(21)
    k = 10
    z0, r = t(g.normal(0, 1.0, k)), t(np.linspace(0.0, 1.0, k))
    alpha = 0.2
    configs = {
        "pg (kl_cov beta 0)": (M.get("kl_cov", k_ratio=0.05, beta=0.0), False),
        "kl_cov beta 1 constant": (M.get("kl_cov", k_ratio=0.05, beta=1.0), False),
        "kl_cov beta 0.25 constant": (M.get("kl_cov", k_ratio=0.05, beta=0.25), False),
        "kl_cov k 2e-3 (official) beta 1 constant": (M.get("kl_cov", k_ratio=2e-3, beta=1.0), False),
        "kl_cov beta 1 annealed": (
            harness.get_method("kl_cov", k_ratio=0.05, beta=1.0, beta_schedule="linear", anneal_steps=outer),
            False,
        ),
        f"entropy_bonus {alpha}": (harness.get_method("entropy_bonus", coef=alpha, eps_low=1e3, eps_high=1e3), True),
    }
    batches = {}

    def harness_step(m, ent):
        def fn(z, z_old, step):
            key = tuple(z_old.tolist())
            if key not in batches:
                counts = largest_remainder_counts(probs(z_old).numpy(), 2000)
                acts = torch.repeat_interleave(torch.arange(k), torch.as_tensor(counts))
                batches.clear()
                batches[key] = (acts, advantage(z_old, r)[acts][None, :])
            acts, adv = batches[key]
            return batch_dz(m, z, z_old, acts, adv, step=step, entropy_coef=ent)

        return fn

    traj = {name: run_rollouts(harness_step(m, ent), z0, outer, inner) for name, (m, ent) in configs.items()}
    traj["paper KL(pi_old||pi), beta 1 constant (exact)"] = run_rollouts(
        lambda z, z_old, step: smooth_kl_step(z, z_old, r, 1.0), z0, outer, inner
    )
    curves, final = {}, {}
    for name, zs in traj.items():
        gaps = [float(r.max() - (probs(z) * r).sum()) for z in zs]
        curves[name] = gaps
        final[name] = {
            "gap_at_T/2": gaps[outer // 2 - 1],
            "gap_at_T": gaps[-1],
            "decay_ratio_T_vs_T/2": gaps[-1] / gaps[outer // 2 - 1],
            "|grad J| at T": float((probs(zs[-1]) * advantage(zs[-1], r)).norm()),
        }
    star_gap = float(r.max() - (torch.softmax(r / alpha, 0) * r).sum())
    plateau = lambda n: final[n]["decay_ratio_T_vs_T/2"] > 0.8
    annealed_ok = (
        not plateau("kl_cov beta 1 annealed") and final["kl_cov beta 1 annealed"]["gap_at_T"] < 0.25 * star_gap
    )
    ent_biased = plateau(f"entropy_bonus {alpha}")
    const_biased = plateau("kl_cov beta 1 constant")
    weak_plateau = {n: plateau(n) for n in ("kl_cov beta 0.25 constant", "kl_cov k 2e-3 (official) beta 1 constant")}
    smooth_ok = not plateau("paper KL(pi_old||pi), beta 1 constant (exact)")
    ok = annealed_ok and ent_biased
    return claim(
        "thm_vii3",
        "KL-Cov with beta annealed is asymptotically unbiased (grad J(theta*) = 0), while entropy "
        "regularisation keeps a permanent bias",
        ("holds under conditions" if const_biased or not smooth_ok else "holds") if ok else "does not hold as stated",
        {
            "K": k,
            "rollouts": outer,
            "inner_updates": inner,
            "final": final,
            "entropy_bonus_stationary_gap_softmax(r/alpha)": star_gap,
            "constant_beta_plateaus": const_biased,
            "weaker_penalties_plateau": weak_plateau,
            "paper_smooth_kl_constant_beta_unbiased": smooth_ok,
            "curves": curves,
        },
        experiment=f"K=10 bandit (rewards 0..1), {outer} rollouts x {inner} updates; each rollout is a population "
        "batch of 2000 tokens from pi_old with exact advantages; updates are gradients of the harness "
        "losses (kl_cov beta 0 = PG; kl_cov k 0.05 with beta 1 and 0.25 constant; kl_cov k 2e-3 beta 1; kl_cov "
        "beta 1 linearly annealed to 0 by its "
        f"own schedule; entropy_bonus {alpha}); plus the paper's smooth full-KL penalty computed exactly; "
        "a plateau = gap(T)/gap(T/2) > 0.8",
        conditions="annealed KL-Cov converges to the optimum and the entropy bonus stalls at the gap of "
        "softmax(r/alpha), as claimed. Annealing is needed only for the official/harness |log r| penalty "
        "and only when it is strong: its pull on a selected token has strength beta whatever |log r| is, "
        "so with several updates per rollout a strong constant penalty (beta 1, k 0.05) balances the "
        "vanishing policy gradient at a non-optimal point (plateau), while weaker ones (beta 0.25, or the "
        "official k = 2e-3) kept converging over 200 rollouts (weaker_penalties_plateau). With the paper's "
        "smooth KL(pi_old || pi) the penalty vanishes at pi = pi_old and even constant beta is unbiased"
        if (const_biased and smooth_ok)
        else "see the evidence",
        supported=None if ok else "annealed KL-Cov did not converge or entropy bonus was not biased here",
        figure="unbiasedness.png",
    )


def margin(z: torch.Tensor, d: torch.Tensor, eps: float = 0.01, iters: int = 60) -> torch.Tensor:
    """gamma = max eta with KL(pi || softmax(z + eta d)) <= eps, by bisection (batched over rows)."""
    p = probs(z)
    lo, hi = torch.zeros(z.shape[0], dtype=z.dtype), torch.full((z.shape[0],), 1e6, dtype=z.dtype)
    for _ in range(iters):
        mid = torch.sqrt(lo * hi) if bool((lo > 0).all()) else (lo + hi) / 2
        ok = kl(p, z + mid[:, None] * d) <= eps
        lo, hi = torch.where(ok, mid, lo), torch.where(ok, hi, mid)
    return lo


def thm_vii4(instances: int = 200, eps: float = 0.01) -> dict:
    g = np.random.default_rng(8)
    z, r = t(g.normal(0, 2.0, (instances, 50))), t(g.uniform(0, 1, (instances, 50)))
    base = probs(z) * advantage(z, r)
    gb = margin(z, base, eps)
    collapsing = (cov_pi(probs(z), logp(z), base) > 0).numpy()  # the PG step lowers entropy
    res = {}
    for alpha in (0.01, 0.1, 1.0):
        gr = margin(z, base + alpha * entropy_grad(z), eps)
        ratio = (gr / gb).numpy()
        res[f"alpha_{alpha}"] = {
            "P(gamma_reg > gamma_base)": float(np.mean(ratio > 1)),
            "P(... | PG step lowers entropy)": float(np.mean(ratio[collapsing] > 1)),
            "P(... | PG step raises entropy)": float(np.mean(ratio[~collapsing] > 1)),
            "median_ratio": float(np.median(ratio)),
            "min_ratio": float(ratio.min()),
            "max_ratio": float(ratio.max()),
            "ratios": ratio.round(6).tolist(),
        }
    p = probs(z)
    fisher = lambda d: (p * d**2).sum(-1) - (p * d).sum(-1) ** 2
    pred = torch.sqrt(2 * eps / fisher(base))
    fisher_rel = float(((pred - gb) / gb).abs().median())
    cov = []
    for seed in range(6):
        pop = Population(40, 5000, seed=200 + seed)
        zb = pop.z[None, :]
        d_pg = vanilla_step(pop.grads(M.get("kl_cov", k_ratio=0.01, beta=0.0), pop.z)[0], pop.z)[None, :]
        d_kl = vanilla_step(pop.grads(M.get("kl_cov", k_ratio=0.01, beta=1.0), pop.z)[0], pop.z)[None, :]
        d_cc = vanilla_step(
            pop.grads(
                M.get("clip_cov", clip_ratio=0.02, lb=1.0, ub=5.0, eps=1.0),
                pop.z,
                generator=torch.Generator().manual_seed(seed),
            )[0],
            pop.z,
        )[None, :]
        m0 = float(margin(zb, d_pg, eps)[0])
        cov.append(
            {"kl_cov/pg": float(margin(zb, d_kl, eps)[0]) / m0, "clip_cov/pg": float(margin(zb, d_cc, eps)[0]) / m0}
        )
    widen = max(v["P(gamma_reg > gamma_base)"] for v in res.values())
    return claim(
        "thm_vii4",
        "Stability margin gamma = max{eta: KL(pi_old || pi_new) <= eps}: gamma_reg <= gamma_base / "
        "(1 + alpha kappa), while covariance methods preserve gamma_base",
        "does not hold as stated" if widen > 0 else "holds",
        {
            "eps": eps,
            "instances": instances,
            "instances_where_pg_lowers_entropy": int(collapsing.sum()),
            "entropy_reg": res,
            "fisher_prediction_median_rel_error": fisher_rel,
            "covariance_methods_first_update_ratio": cov,
        },
        experiment="200 random K=50 bandits: exact PG direction pi*A and the regularised pi*A + alpha grad H; "
        "gamma found by bisection on the exact KL; covariance methods: logit step of the harness "
        "kl_cov / clip_cov losses on on-policy population batches vs the PG loss (kl_cov, beta 0)",
        supported="gamma ~ sqrt(2 eps / (g' F g)) with F the softmax Fisher (checked), so entropy regularisation "
        "shrinks the margin only when it raises the Fisher norm of the step; when the PG step sharpens the "
        "policy (the collapse regime) grad H opposes it and a moderate alpha widens the margin "
        "(probabilities in the evidence). KL-Cov leaves the first on-policy update exactly unchanged "
        "(ratio 1); Clip-Cov changes the margin by a few percent either way (ratios in the evidence)"
        if widen > 0
        else None,
        figure="stability_margin.png",
    )


def linear_topk(values: np.ndarray, k: int) -> np.ndarray:
    """Top-k mask in O(N): introselect threshold (numpy.partition) + one pass; ties taken in position order."""
    thr = np.partition(values, len(values) - k)[len(values) - k]
    above = values > thr
    ties = np.flatnonzero(values == thr)[: k - int(above.sum())]
    above[ties] = True
    return above


def prop_vii1() -> dict:
    """The harness's KL-Cov selection equals a linear-time selection; wall time vs N for selection and sorting."""
    gen = torch.Generator().manual_seed(0)
    kl_m = M.get("kl_cov", k_ratio=2e-3, beta=1.0)
    cc_m = M.get("clip_cov", clip_ratio=2e-4, lb=1.0, ub=5.0, eps=1.0)
    same = []
    for n, rounding in ((5000, None), (20000, 1)):
        lp = -torch.rand(1, n, generator=gen, dtype=torch.float64) * 5
        adv = torch.randn(1, n, generator=gen, dtype=torch.float64)
        if rounding is not None:  # many exact ties
            lp, adv = lp.round(decimals=rounding), adv.round(decimals=rounding)
        mask = torch.ones(1, n)
        sel = kl_m.selection_plan(lp, lp, adv, mask)[0].numpy()
        cov = harness.kernel.ops.token_covariance(adv, lp, mask)[0].numpy()
        same.append(bool((sel == linear_topk(cov, max(1, int(n * 2e-3)))).all()))
    sizes = [2**e for e in range(14, 20)]
    times = {
        name: []
        for name in (
            "kl_cov.select_tokens",
            "clip_cov.select_tokens",
            "numpy.partition (introselect)",
            "torch.sort",
            "linear pass (covariance)",
        )
    }
    for n in sizes:
        shape = (n // 1024, 1024)
        lp, adv, mask = -torch.rand(shape, generator=gen) * 5, torch.randn(shape, generator=gen), torch.ones(shape)
        arr = lp.flatten().numpy()
        fns = {
            "kl_cov.select_tokens": lambda: kl_m.selection_plan(lp, lp, adv, mask),
            "clip_cov.select_tokens": lambda: cc_m.selection_plan(lp, lp, adv, mask, generator=gen),
            "numpy.partition (introselect)": lambda: np.partition(arr, n - int(n * 2e-3)),
            "torch.sort": lambda: torch.sort(lp.flatten()),
            "linear pass (covariance)": lambda: harness.kernel.ops.token_covariance(adv, lp, mask),
        }
        for name, fn in fns.items():
            runs = []
            for _ in range(3):
                t0 = time.perf_counter()
                fn()
                runs.append(time.perf_counter() - t0)
            times[name].append(min(runs))
    slopes = {name: fit_order(sizes, v) for name, v in times.items()}
    per_tok = {name: v[-1] / sizes[-1] * 1e9 for name, v in times.items()}
    linear = all(same)
    return claim(
        "prop_vii1",
        "Per-iteration cost: entropy regularisation O(N); Clip-Cov / KL-Cov O(N log N) (sorting)",
        "does not hold as stated" if linear else "holds",
        {
            "harness_topk_equals_linear_time_selection": same,
            "N": sizes,
            "seconds_best_of_3": times,
            "log-log slope": slopes,
            "ns_per_token_at_N=2^19": per_tok,
            "entropy_bonus_extra_cost": "the full-vocabulary entropy and its backward: O(N V) for vocabulary V",
        },
        experiment="(1) the harness kl_cov selection (k = 2e-3 N) vs a linear-time selection (introselect "
        "threshold + one pass, ties in position order) on random tokens, with and without many ties; "
        "(2) best-of-3 wall time of the harness selections, introselect, a full sort and one linear pass "
        "for N = 2^14..2^19 on one CPU thread",
        supported="selection needs only linear time: the covariance is one O(N) pass, the top-k set is an "
        "O(N) selection (identical to the harness's selection, checked) and Clip-Cov draws a random subset "
        "of its candidates in O(N); no sort is needed. Wall time cannot separate N from N log N over "
        "2^14..2^19 on a shared CPU (log-log slope of one linear pass: "
        f"{slopes['linear pass (covariance)']:.2f}, of a full sort: {slopes['torch.sort']:.2f}); the "
        "selections cost about as much per token as a full sort or less (evidence), and all are "
        "negligible next to the O(N V) vocabulary softmax every method already pays"
        if linear
        else None,
    )
