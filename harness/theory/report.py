"""Run every claim experiment, write report.json, report.md and the figures."""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager

import numpy as np
import torch

from . import cliplow, compare, covmethods, dynamics, entreg
from . import methods as M

CLAIMS = [
    dynamics.lemma_iv1,
    dynamics.lemma_iv2,
    dynamics.prop_iv1,
    dynamics.thm_iv1,
    entreg.thm_v1,
    entreg.thm_v2,
    entreg.cor_v1,
    covmethods.prop_vi1,
    covmethods.thm_vi1,
    covmethods.thm_vi2,
    compare.thm_vii1,
    compare.thm_vii2,
    compare.thm_vii3,
    compare.thm_vii4,
    compare.prop_vii1,
    cliplow.park_cliplow,
]


def _g(d, *keys):
    for k in keys:
        d = d[k]
    return d


SUMMARY = {
    "lemma_iv1": lambda e: f"max |closed form - autograd| = {e['worst']:.1e}",
    "lemma_iv2": lambda e: f"error order in eta {min(e['error_order_in_eta']):.2f}-{max(e['error_order_in_eta']):.2f}",
    "prop_iv1": lambda e: (
        f"bandit error {e['bandit_max_abs_error']:.0e}; tree child logits off by "
        f"{e['tree_child_relative_error_as_stated']:.1f}x (rel.) without d(s), "
        f"{e['tree_max_abs_error_with_d(s)']:.0e} with it"
    ),
    "thm_iv1": lambda e: "error order {:.2f} (vanilla), {:.2f} (natural); rel. error at eta=1e-4 <= {:.1e}".format(
        min(x["order"] for x in e["bandits_K1000_x3_and_K32768"]["vanilla"]),
        min(x["order"] for x in e["bandits_K1000_x3_and_K32768"]["natural"]),
        max(x["rel_err_eta_1e-4"] for v in e["bandits_K1000_x3_and_K32768"].values() for x in v),
    ),
    "thm_v1": lambda e: (
        f"alpha*eta*Var(log pi) overstates the extra term {min(x['paper_over_measured'] for x in e['bandits']):.0f}"
        f"-{max(x['paper_over_measured'] for x in e['bandits']):.0f}x; exact form "
        f"sum pi^2 (log pi - mu)^2 matches to {e['max_rel_err_exact_form']:.0e}"
    ),
    "thm_v2": lambda e: (
        "reward gap of softmax(r/alpha): "
        + ", ".join(f"{x['alpha']}: {x['gap_E*[r]-E_reg[r]']:.3g}" for x in e["per_alpha"])
    ),
    "cor_v1": lambda e: (
        "usable alpha window {:.2f} decades wide (after T steps), moves {:.1f} decade per 10x reward scale".format(
            e["window_width_decades"]["scale_1.0/after_T"], e["window_shift_decades_for_10x_reward_scale"]
        )
    ),
    "prop_vi1": lambda e: (
        "identity error {:.0e}; dH = -eta(1-r)Cov_eff to {:.0e} rel., -eta Cov_eff off by {:.3f} at r={}".format(
            e["max_identity_abs_error"],
            max(x["rel_err_dH_vs_-eta(1-r)Cov_eff_at_1e-4"] for x in e["cases"]),
            e["cases"][1]["rel_err_dH_vs_-eta_Cov_eff_at_1e-4"],
            e["cases"][1]["r=|I|/N"],
        )
    ),
    "thm_vi1": lambda e: (
        "paper form exact ({:.0e}); harness |log r| penalty = sign form ({:.0e}); cosine with "
        "the paper's form on selected actions {:.2f}-{:.2f}, but its size scales as displacement^{:.2f} "
        "(paper: ^{:.2f}); zero on the first update".format(
            e["paper_form_autograd_max_abs_error"],
            max(x["rel_err_sign_form"] for x in e["harness_kl_cov"]),
            min(x["cosine_paper_selected_actions_only"] for x in e["harness_kl_cov"]),
            max(x["cosine_paper_selected_actions_only"] for x in e["harness_kl_cov"]),
            e["scaling_with_displacement"]["harness_order"],
            e["scaling_with_displacement"]["paper_order"],
        )
    ),
    "thm_vi2": lambda e: (
        "P(penalty raises H): "
        + "; ".join(f"{k}: {v['harness']:.2f}" for k, v in e["P(penalty raises entropy)"].items())
        + " (harness)"
    ),
    "thm_vii1": lambda e: (
        "reg variance = PG's ({:.0e}); Cov(reg)-Cov(cov) not PSD in {}/{} (Clip-Cov), {}/{} (KL-Cov) "
        "instances; variance ratio above 1 in {}, below 1 in {} (KL-Cov)".format(
            e["max_abs(Cov_reg - Cov_pg)"],
            e["instances_not_psd_beyond_noise"]["clip_cov"],
            len(e["instances"]),
            e["instances_not_psd_beyond_noise"]["kl_cov"],
            len(e["instances"]),
            e["instances_variance_above_pg"]["kl_cov"],
            e["instances_variance_below_pg"]["kl_cov"],
        )
    ),
    "thm_vii2": lambda e: "max ratio (best |grad|^2)/bound = {:.2f}".format(
        max(x["max_T min_t|grad|^2 / bound"] for x in e["runs"])
    ),
    "thm_vii3": lambda e: "gap at T: " + ", ".join(f"{k}: {v['gap_at_T']:.2g}" for k, v in e["final"].items()),
    "thm_vii4": lambda e: (
        "P(gamma_reg > gamma_base) = {:.2f} / {:.2f} / {:.2f} for alpha 0.01 / 0.1 / 1; when the PG "
        "step lowers entropy: {:.2f} / {:.2f} / {:.2f}; KL-Cov first update ratio 1".format(
            *(v["P(gamma_reg > gamma_base)"] for v in e["entropy_reg"].values()),
            *(v["P(... | PG step lowers entropy)"] for v in e["entropy_reg"].values()),
        )
    ),
    "prop_vii1": lambda e: (
        "harness top-k == linear-time selection: {}; ns/token at 2^19: KL-Cov {:.0f}, "
        "Clip-Cov {:.0f}, sort {:.0f}, introselect {:.1f}".format(
            all(e["harness_topk_equals_linear_time_selection"]),
            *(
                e["ns_per_token_at_N=2^19"][k]
                for k in (
                    "kl_cov.select_tokens",
                    "clip_cov.select_tokens",
                    "torch.sort",
                    "numpy.partition (introselect)",
                )
            ),
        )
    ),
    "park_cliplow": lambda e: (
        "net clip effect at 0.2/0.2 (nats): "
        + ", ".join(f"H0 {x['entropy_start']:.2f}: {x['net_effect'][0]:+.2f}" for x in e["regimes_symmetric"])
        + "; end entropy vs symmetric: eps_low 0.1 {:+.3f}, eps_low 0.4 {:+.3f}".format(
            e["configs_peaked"]["tighter clip-low 0.1/0.2"]["end_minus_symmetric"][0],
            e["configs_peaked"]["raised eps_low 0.4/0.2"]["end_minus_symmetric"][0],
        )
    ),
}


@contextmanager
def one_thread():
    """One intra-op thread: timings and speed are steadier on a shared CPU."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def run_all(only: list[str] | None = None) -> dict:
    claims, timing = [], {}
    with one_thread():
        for fn in CLAIMS:
            if only and fn.__name__ not in only:
                continue
            t0 = time.perf_counter()
            rec = fn()
            timing[rec["id"]] = round(time.perf_counter() - t0, 3)
            rec["seconds"] = timing[rec["id"]]
            try:
                rec["summary"] = SUMMARY[rec["id"]](rec["evidence"])
            except (KeyError, IndexError, TypeError, ValueError) as e:  # a summary must never hide a result
                rec["summary"] = f"(summary unavailable: {e})"
            claims.append(rec)
    return {
        "claims": claims,
        "method_source": M.source(M.get("kl_cov")),
        "torch": torch.__version__,
        "seconds_total": round(sum(timing.values()), 2),
    }


def _atomic_text(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def _savefig(fig, path: str) -> None:
    fig.savefig(path + ".tmp.png", dpi=110)
    os.replace(path + ".tmp.png", path)


def write(report: dict, out: str) -> None:
    """report.json, the figures, then report.md; each file written to a temporary name and renamed."""
    os.makedirs(out, exist_ok=True)
    _atomic_text(os.path.join(out, "report.json"), json.dumps(report, indent=1, default=float))
    figures(report, out)
    _atomic_text(os.path.join(out, "report.md"), markdown(report))


def verdict_table(report: dict) -> str:
    rows = ["| claim | verdict | measured |", "| --- | --- | --- |"]
    cell = lambda x: str(x).replace("|", "\\|")  # a literal | would end the markdown cell
    rows += [f"| `{c['id']}` | {c['verdict']} | {cell(c.get('summary', ''))} |" for c in report["claims"]]
    return "\n".join(rows)


def markdown(report: dict) -> str:
    out = [
        "# Theory lab report",
        "",
        f"Exact float64 experiments on softmax policies; Clip-Cov / KL-Cov through the harness's own code "
        f"(source: `{report['method_source']}`). Total compute {report['seconds_total']} s.",
        "",
        verdict_table(report),
        "",
    ]
    for c in report["claims"]:
        out += [
            f"## `{c['id']}`: {c['verdict']}",
            "",
            f"**Claim.** {c['statement']}",
            "",
            f"**Experiment.** {c['experiment']}",
            "",
            f"**Measured.** {c.get('summary', '')}",
            "",
        ]
        if c.get("conditions"):
            out += [f"**Conditions.** {c['conditions']}", ""]
        if c.get("supported_statement"):
            out += [f"**What the numbers support.** {c['supported_statement']}", ""]
        if c.get("note"):
            out += [f"**Note.** {c['note']}", ""]
        if c.get("figure"):
            out += [f"![{c['id']}]({c['figure']})", ""]
    return "\n".join(out)


def figures(report: dict, out: str) -> None:
    """One figure per claim that has one (``FIGURES``), from its evidence, into ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {c["id"]: c for c in report["claims"]}
    for claim_id, (draw, name) in FIGURES.items():
        if claim_id in by:
            fig = draw(plt, by[claim_id]["evidence"])
            fig.tight_layout()
            _savefig(fig, os.path.join(out, name))
            plt.close(fig)


def _first_order_figure(plt, e: dict):
    eta = np.array(e["etas"])
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for name, errs in e["error_curve_seed0"].items():
        ax.loglog(eta, errs, "o-", label=f"{name} PG: |dH - first-order|")
    ref = e["error_curve_seed0"]["vanilla"][0] * (eta / eta[0]) ** 2
    ax.loglog(eta, ref, "k--", lw=0.8, label="slope 2")
    ax.set_xlabel("step size eta")
    ax.set_ylabel("error of -eta Cov prediction")
    ax.set_title("Theorem IV.1: first-order error is O(eta^2)")
    ax.legend(fontsize=7)
    return fig


def _entropy_reg_figure(plt, e: dict):
    sw = e["sweep"]
    mp = np.array(sw["max_pi"])
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ratio = np.array(sw["Var(log pi)"]) / np.array(sw["measured"])
    ax.loglog(mp, ratio, "o", ms=4, label="Var(log pi) / measured extra term")
    ax.loglog(
        mp, np.array(sw["exact"]) / np.array(sw["measured"]), "s", ms=3, label="sum pi^2 (log pi - mu)^2 / measured"
    )
    xs = np.logspace(np.log10(mp.min()), 0, 50)
    ax.loglog(xs, 1 / xs, "k:", lw=0.8, label="1 / max pi (lower bound of the first ratio)")
    ax.set_xlabel("max_a pi_a")
    ax.set_ylabel("predicted / measured")
    ax.set_title("Thm V.1: predicted / measured extra entropy term", fontsize=10)
    ax.legend(fontsize=7)
    return fig


def _alpha_figure(plt, e: dict):
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for (key, c), color in zip(e["curves"].items(), ("C0", "C3")):
        a = np.array(c["alpha"])
        axes[0].semilogx(a, c["entropy_after_T"], "o-", ms=3, color=color, label=f"{key}: after 300 steps")
        axes[0].semilogx(a, c["stationary_entropy"], ":", color=color, label=f"{key}: stationary")
        axes[1].semilogx(a, c["gap_after_T_over_scale"], "o-", ms=3, color=color, label=f"{key}: after 300 steps")
        axes[1].semilogx(a, c["stationary_gap_over_scale"], ":", color=color, label=f"{key}: stationary")
    axes[0].set_ylabel("policy entropy")
    axes[1].set_ylabel("reward gap / reward scale")
    for ax in axes:
        ax.set_xlabel("entropy coefficient alpha")
        ax.legend(fontsize=6)
    fig.suptitle("Corollary V.1: alpha sensitivity (K=100 bandit)")
    return fig


def _stability_figure(plt, e: dict):
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for key, v in e["entropy_reg"].items():
        ax.hist(np.log10(v["ratios"]), bins=40, histtype="step", lw=1.5, label=key.replace("_", " = "))
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel("log10(gamma_reg / gamma_base); > 0: wider margin")
    ax.set_ylabel("bandit instances")
    ax.set_title("Theorem VII.4: stability margin with entropy regularisation", fontsize=10)
    ax.legend(fontsize=7)
    return fig


def _cliplow_figure(plt, e: dict):
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for name, c in e["configs_peaked"].items():
        ax.plot(c["entropy_curve"], label=name)
    ax.set_xlabel("rollout")
    ax.set_ylabel("policy entropy (nats)")
    ax.set_title("Clip-low vs clip-high with random rewards (bandit)", fontsize=10)
    ax.legend(fontsize=7)
    return fig


def _unbiasedness_figure(plt, e: dict):
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for name, gaps in e["curves"].items():
        ax.loglog(np.arange(1, len(gaps) + 1), gaps, label=name)
    gap = e["entropy_bonus_stationary_gap_softmax(r/alpha)"]
    ax.axhline(gap, color="k", ls=":", lw=0.8, label="softmax(r/alpha) gap")
    ax.set_xlabel("rollout")
    ax.set_ylabel("reward gap to optimum")
    ax.set_title("Theorem VII.3: bias of each method")
    ax.legend(fontsize=6)
    return fig


# claim id -> (its figure from the claim's evidence, file name); drawn in this order
FIGURES = {
    "thm_iv1": (_first_order_figure, "first_order.png"),
    "thm_v1": (_entropy_reg_figure, "entropy_reg_term.png"),
    "cor_v1": (_alpha_figure, "alpha_sensitivity.png"),
    "thm_vii4": (_stability_figure, "stability_margin.png"),
    "park_cliplow": (_cliplow_figure, "cliplow.png"),
    "thm_vii3": (_unbiasedness_figure, "unbiasedness.png"),
}
