"""Population training: pocket runs of one shape (same model size, task, batch sizes, steps; any seed and method)
trained in one process, their parameters stacked and every forward, backward and sampling step batched across
them (stacked.py). docs/pocket.md, "Population training".

Each member is a ``PocketTrainer`` with its own config, run directory, method object, tokenizer, task, trackers
and metrics rows; the population drives its ``rollout_plan``/``eval_plan`` generators (answering their generation
requests for all members at once) and reuses its metric, record, checkpoint and finish steps, so a member writes
what a separate run writes: metrics.jsonl, eval/, checkpoints/latest.pt (its own HF state dict and AdamW state:
a separate ``harness train`` can resume it), the trackers' files, and through the caller result.json.

Per member, exactly as in a separate run: the (seed, step, purpose) generators (prompts, sampling draws,
shuffles, the method's draws, eval), the mini-batch split and micro-batch slicing, ``policy_loss`` per
micro-batch with the separate run's micro-batch weights, the optimizer step count (a step that made no update
leaves the member untouched), gradient-norm clipping, the method's state and the order of every call on it.
What differs from a separate run is float rounding only (stacked.py, stacked_optim.py): a member agrees with its
separate run at step 1 to ~1e-5 (tests/pocket/test_population.py), and since a sampled token flips when rounding
moves a draw across a probability boundary, trajectories drift apart as separate runs on two CPUs do.

A member's numbers never depend on which other runs share its population (fixed widths: stacked.py), so a
rerun is bit-identical, and members resumed from checkpoints of different steps (a kill while checkpoints were
being written) first train alone up to the others, then join them, ending bit-identical to an uninterrupted
population. A member that fails (a non-finite gradient, a loss error) fails alone; the others go on.
"""

from __future__ import annotations

import time

import torch

from harness.io import StopRequested, signals_stop_flag
from harness.kernel import ops
from harness.run.metrics import add_eval

from . import stacked
from .generate import Batch, _record, concat_batches, draw, sampling_logits
from .population_rules import why_apart
from .stacked import FlatParams, StackedDecoder, logprobs_from_logits
from .stacked_optim import StackedOptimizer
from .trainer import (
    CKPT,
    PocketTrainer,
    add_grads,
    add_loss_metrics,
    entropy_change,
    first_order_delta,
    grad_norm,
    make_generator,
    nonfinite_gradient,
    update_metrics,
)

CHUNK_ROWS = 512  # generation chunk (PocketTrainer._generate's chunk_size): the draws come in the same order
# Members per set of stacked tensors (``Group``), and rows per batched generation call. At pocket sizes on a CPU
# the step is bound by memory traffic more than by per-op overhead: stacking more members than this makes each
# op's working set fall out of cache and costs more than it saves (benchmarks/bench_population.py). A member's
# numbers do not depend on these (stacked.py).
GROUP_MEMBERS = 4
GENERATE_ROWS = 2048


def _warm_start_busy(cfg) -> bool:
    """True while another process holds the lock of the warm start ``cfg`` needs and has not cached it yet."""
    import fcntl

    from . import models
    from .tokenizer import build_char_tokenizer
    from .warmstart import cache_key, cache_root

    if not models.is_pocket(cfg.model.name) or cfg.model.warm_start.enabled == "false":
        return False
    root = cache_root(cfg)
    key = cache_key(cfg, len(build_char_tokenizer()))  # the tokenizer a pocket run builds
    lock = root / f".{key}.lock"
    if (root / f"{key}.pt").exists() or not lock.exists():
        return False
    with open(lock) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


class Group:
    """Members that train in lockstep: their stacked parameters, optimizer states and auxiliary models."""

    def __init__(self, pop: Population, members: list[int]):
        self.pop, self.members = pop, members
        ts = [pop.trainers[i] for i in members]
        pieces = pop.pieces
        self.params = FlatParams.from_members(pieces, [dict(t.model.named_parameters()) for t in ts])
        self.dec = StackedDecoder(ts[0].model, self.params)
        train = ts[0].cfg.train
        self.opt = StackedOptimizer(self.params, train.optimizer, [t.cfg.train.lr for t in ts], train.weight_decay)
        for g, t in enumerate(ts):
            self.opt.load_member(g, t.opt, t.model)
        self.aux = [g for g, t in enumerate(ts) if t.aux is not None]  # group positions with an auxiliary model
        if self.aux:
            aux_ts = [ts[g] for g in self.aux]
            self.aux_params = FlatParams.from_members(pieces, [dict(t.aux_model.named_parameters()) for t in aux_ts])
            self.aux_dec = self.dec.with_params(self.aux_params)
            self.aux_opt = StackedOptimizer(self.aux_params, "adamw", [t.aux.lr for t in aux_ts], 0.0)
            for a, t in enumerate(aux_ts):
                self.aux_opt.load_member(a, t.aux_opt, t.aux_model)
            ref = FlatParams.from_members(pieces, [dict(t.ref.named_parameters()) for t in aux_ts], requires_grad=False)
            self.ref_dec = self.dec.with_params(ref)

    def sync(self) -> None:
        """Write each member's parameters and optimizer state into its trainer's model and optimizer."""
        with torch.no_grad():
            for g, i in enumerate(self.members):
                t = self.pop.trainers[i]
                _load(t.model, self.params.member_tensors(g))
                self.opt.store_member(g, t.opt, t.model)
            for a, g in enumerate(self.aux):
                t = self.pop.trainers[self.members[g]]
                _load(t.aux_model, self.aux_params.member_tensors(a))
                self.aux_opt.store_member(a, t.aux_opt, t.aux_model)


def _load(model, tensors: dict) -> None:
    for name, p in model.named_parameters():
        p.copy_(tensors[name])


class Population:
    """Train ``trainers`` (PocketTrainer, not yet set up) as one population; ``run()`` returns, per trainer, its
    RunResult or the exception it failed with."""

    def __init__(self, trainers: list[PocketTrainer], log=print):
        self.trainers, self.log = trainers, log
        self.failed: dict[int, BaseException] = {}
        self.step: dict[int, int] = {}
        self.last_eval: dict[int, dict | None] = {}
        self.stop: dict = {}

    # ------------------------------------------------------------------------------------ set-up
    def setup(self) -> None:
        problem = why_apart([t.cfg for t in self.trainers])
        if problem:
            raise ValueError(f"population: {problem}")
        for i in self._setup_order():
            t = self.trainers[i]
            try:
                t.setup()
                t.maybe_resume()
            except Exception as e:  # noqa: BLE001 - e.g. a refused checkpoint: that member fails, the others go on
                self.fail(i, e)
                continue
            self.step[i] = t.start_step
            self.last_eval[i] = None
        live = self.live()
        if not live:
            return
        t0 = self.trainers[live[0]]
        reason = stacked.why_not(t0.model)
        if reason:
            raise ValueError(f"population: {reason}")
        self.pieces = stacked.layout(t0.model)
        self.tok, self.device = t0.tok, t0.device
        problems = list(t0.task.train) + list(t0.task.test)
        self.width = max(len(self.tok.encode_prompt(p["prompt"])) for p in problems)  # every prompt fits
        cfg = t0.cfg.train
        self.t_fix = cfg.max_new_tokens
        self.rows = -(-cfg.micro_batch_size // stacked.ROW_MULTIPLE) * stacked.ROW_MULTIPLE

    def _setup_order(self):
        """Member indices in set-up order: a member whose warm start another process is training right now (two
        population jobs of one sweep need the same seeds) waits until the others are set up, so this process
        trains or loads another one meanwhile instead of waiting on that warm start's lock."""
        pending = list(range(len(self.trainers)))
        while pending:
            free = [i for i in pending if not _warm_start_busy(self.trainers[i].cfg)]
            i = free[0] if free else pending[0]  # all busy: wait for the first
            pending.remove(i)
            yield i

    def fail(self, i: int, e: BaseException) -> None:
        self.failed[i] = e  # its traceback goes to its result.json (runner.finish)
        self.trainers[i].log(f"population member failed: {type(e).__name__}: {e}")

    def live(self) -> list[int]:
        return [i for i in range(len(self.trainers)) if i not in self.failed]

    # ------------------------------------------------------------------------------------ main loop
    def run(self) -> list:
        from harness.io import signals_interrupt

        with signals_interrupt():  # nothing to save during set-up
            self.setup()
            first = [i for i in self.live() if self.step[i] == 0]
            ev_every = self.trainers[first[0]].cfg.eval.every if first else 0
            if first and ev_every > 0:
                for i, doc in self.evaluate(first, 0).items():
                    self.last_eval[i] = doc
                    self.trainers[i].trackers.log_eval(doc)
        groups = []
        try:
            with signals_stop_flag(self.stop):
                while True:
                    live = [i for i in self.live() if self.step[i] < self.trainers[i].cfg.train.steps]
                    if not live:
                        break
                    low = min(self.step[i] for i in live)
                    members = [i for i in live if self.step[i] == low]
                    later = [self.step[i] for i in live if self.step[i] > low]
                    until = min(later) if later else self.trainers[members[0]].cfg.train.steps
                    if len(later):
                        self.log(f"population: {len(members)} member(s) at step {low} train alone up to step {until}")
                    k = GROUP_MEMBERS
                    groups = [Group(self, members[a : a + k]) for a in range(0, len(members), k)]
                    self.train_until(groups, until)
                    for group in groups:
                        group.sync()
                    groups = []
        except StopRequested as e:  # first Ctrl-C / SIGTERM: every member checkpointed at its last step
            for group in groups:
                group.sync()
            for i in self.live():
                self.trainers[i].save_checkpoint(self.step[i])
                self.trainers[i].log(
                    f"interrupted ({e}) after step {self.step[i]}; checkpoint saved to "
                    f"{self.trainers[i].run_dir / CKPT}. Run the same command again to resume."
                )
            raise KeyboardInterrupt from None
        finally:
            for i in range(len(self.trainers)):
                t = self.trainers[i]
                if getattr(t, "trackers", None) is not None and self.step.get(i, 0) < t.cfg.train.steps:
                    t.trackers.close()
        out = []
        for i, t in enumerate(self.trainers):
            if i in self.failed:
                out.append(self.failed[i])
                continue
            try:
                result = t.finish(self.step[i], self.last_eval[i])
            except Exception as e:  # noqa: BLE001 - recorded for that member alone
                out.append(e)
                continue
            result.extra["population"] = {"size": len(self.trainers)}
            out.append(result)
        return out

    def train_until(self, groups: list[Group], until: int) -> None:
        """Train every group one step at a time up to step ``until`` (the groups' members are all at one step)."""
        from tqdm.auto import tqdm

        t_first = self.trainers[groups[0].members[0]]
        step = self.step[groups[0].members[0]]
        bar = tqdm(
            total=t_first.cfg.train.steps,
            initial=step,
            desc=f"population of {sum(len(g.members) for g in groups)} ({t_first.cfg.model.name})",
            leave=False,
            disable=not t_first.cfg.logging.progress,
            mininterval=0.5,
            dynamic_ncols=True,
        )
        t_start = time.time()
        try:
            while step < until:
                if self.stop:
                    raise StopRequested(self.stop["stop"])
                for group in groups:
                    self._one_step(group, step + 1, t_start)
                step += 1
                bar.update(1)
        finally:
            bar.close()

    def _one_step(self, group: Group, step: int, t_start: float) -> None:
        """Step ``step`` of the group's members: train, log, eval when due, checkpoint when due."""
        live = [i for i in group.members if i not in self.failed]
        if not live:
            return
        t0 = time.time()
        before = {i: dict(self.trainers[i].timing) for i in live}
        metrics = self.train_step(group, step)
        rows = {}
        for i in [i for i in live if i not in self.failed]:
            t, row = self.trainers[i], {"step": step}
            row.update(metrics[i])
            for key in ("rollout", "score", "update"):
                row[f"time/{key}"] = round(t.timing[f"{key}_s"] - before[i][f"{key}_s"], 4)
            row["time/step"] = time.time() - t0
            row["time/wall"] = time.time() - t_start
            rows[i] = row
        due = [i for i in rows if self.trainers[i].eval_due(step)]
        if due:
            for i, doc in self.evaluate(due, step, group).items():
                self.last_eval[i] = doc
                add_eval(rows[i], doc)
        ckpt = [i for i in rows if self.trainers[i].checkpoint_due(step)]
        if ckpt:
            group.sync()
        for i, row in rows.items():
            t = self.trainers[i]
            t.record_step(row, step)
            self.step[i] = step
            if i in ckpt:
                t.save_checkpoint(step)

    # ------------------------------------------------------------------------------------ generation
    def drive(self, plans: dict, group: Group | None) -> dict:
        """Run the members' plan generators to their end, answering their generation requests batched."""
        results, pending = {}, {}

        def advance(i, value=None, first=False):
            try:
                pending[i] = next(plans[i]) if first else plans[i].send(value)
            except StopIteration as done:
                results[i] = done.value
                pending.pop(i, None)
            except Exception as e:  # noqa: BLE001 - a member's scoring or bookkeeping error: that member fails
                self.fail(i, e)
                pending.pop(i, None)

        for i in list(plans):
            advance(i, first=True)
        while pending:
            by_kind: dict = {}
            for i, req in pending.items():
                key = (req.n, req.temperature, len(req.problems), tuple(sorted(req.options.items())))
                by_kind.setdefault(key, []).append(i)
            answers = {}
            for members in by_kind.values():
                req = pending[members[0]]
                per_call = max(1, GENERATE_ROWS // min(CHUNK_ROWS, len(req.problems) * req.n))
                for a in range(0, len(members), per_call):
                    part = members[a : a + per_call]
                    answers.update(self.generate(part, {i: pending[i] for i in part}, group))
            for i in list(pending):
                advance(i, answers[i])
        return results

    def _decoder_for(self, members: list[int], group: Group | None) -> StackedDecoder:
        """A no-grad decoder over ``members`` (their weights from the group, or from their own models)."""
        if group is not None:
            pos = [group.members.index(i) for i in members]
            return group.dec.with_params(group.params.subset(pos))
        ts = [self.trainers[i] for i in members]
        params = FlatParams.from_members(self.pieces, [dict(t.model.named_parameters()) for t in ts], False)
        return StackedDecoder(ts[0].model, params)

    @torch.no_grad()
    def generate(self, members: list[int], requests: dict, group: Group | None) -> dict:
        """One ``PocketTrainer._generate`` per member, batched: the same rows, chunks, draws and widths as each
        member's own call would produce (``generate.generate`` with the fast path)."""
        req = requests[members[0]]
        o = req.options
        cfg = self.trainers[members[0]].cfg.train
        max_new = o.get("max_new_tokens") or cfg.max_new_tokens
        greedy, top_p, with_lp = bool(o.get("greedy", False)), float(o.get("top_p", 1.0)), bool(o.get("with_logprobs"))
        dec = self._decoder_for(members, group)
        n = req.n
        prompts = [[self.tok.encode_prompt(p["prompt"]) for p in requests[i].problems] for i in members]
        rows = len(req.problems) * n
        parts = [[] for _ in members]
        for a in range(0, rows, CHUNK_ROWS):
            b = min(a + CHUNK_ROWS, rows)
            first, last = a // n, (b - 1) // n
            chunk = [p[first : last + 1] for p in prompts]
            expand = torch.arange(a, b) // n - first
            gens = [requests[i].generator for i in members]
            for k, batch in enumerate(
                self._generate_chunk(dec, chunk, expand, max_new, req.temperature, top_p, greedy, gens, with_lp)
            ):
                parts[k].append(batch)
        pad = self.tok.pad_id
        return {i: (p[0] if len(p) == 1 else concat_batches(p, pad)) for i, p in zip(members, parts)}

    def _generate_chunk(self, dec, prompts, expand, max_new, temperature, top_p, greedy, gens, with_lp) -> list[Batch]:
        M, B, pad, dev = len(prompts), expand.shape[0], self.tok.pad_id, self.device
        n_prompts = len(prompts[0])
        n_pad = -(-n_prompts // stacked.ROW_MULTIPLE) * stacked.ROW_MULTIPLE  # + all-padding rows: fixed shapes
        b_pad = -(-B // stacked.ROW_MULTIPLE) * stacked.ROW_MULTIPLE
        P = self.width
        ids = torch.full((M, n_pad, P), pad, dtype=torch.long)
        att = torch.zeros((M, n_pad, P), dtype=torch.long)
        for m, rows in enumerate(prompts):
            for r, p in enumerate(rows):
                ids[m, r, P - len(p) :] = torch.tensor(p, dtype=torch.long)
                att[m, r, P - len(p) :] = 1
        full_expand = torch.cat([expand, torch.full((b_pad - B,), n_prompts if n_pad > n_prompts else 0)])
        ids, att = ids.to(dev), att.to(dev)
        state, logits = dec.start(ids, att, max_new, full_expand.to(dev))
        stop = torch.as_tensor(getattr(self.tok, "stop_ids", self.tok.eos_id), device=dev).reshape(-1)
        done = torch.zeros((M, b_pad), dtype=torch.bool, device=dev)
        done[:, B:] = True
        finished, taken = [False] * M, [0] * M
        tokens, masks, lps, ents = [], [], [], []
        for t in range(max_new):
            if greedy or temperature == 0:
                nxt = logits.argmax(-1)
            else:
                probs = torch.softmax(sampling_logits(logits, temperature, top_p), dim=-1)
                nxt = torch.full((M, b_pad), pad, dtype=torch.long, device=dev)
                for m in range(M):
                    if not finished[m]:
                        nxt[m, :B] = draw(probs[m, :B], gens[m])
            nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
            if with_lp:
                lp, ent = _record(logits.reshape(M * b_pad, -1), nxt.reshape(-1), temperature)
                lps.append(lp.view(M, b_pad))
                ents.append(ent.view(M, b_pad))
            tokens.append(nxt)
            masks.append(~done)
            done = done | torch.isin(nxt, stop)
            for m in range(M):
                if not finished[m]:
                    taken[m] = t + 1
                    finished[m] = bool(done[m, :B].all()) or t == max_new - 1
            if all(finished):
                break
            logits = dec.step(state, nxt)
        responses, rmask = torch.stack(tokens, dim=2), torch.stack(masks, dim=2).float()
        logp = torch.stack(lps, dim=2) * rmask if with_lp else None
        entropy = torch.stack(ents, dim=2) * rmask if with_lp else None
        out = []
        for m in range(M):
            T, Pm = taken[m], max(len(p) for p in prompts[m])
            r, mk = responses[m, :B, :T], rmask[m, :B, :T]
            p_ids, p_att = ids[m][expand][:, P - Pm :], att[m][expand][:, P - Pm :]
            out.append(
                Batch(
                    torch.cat([p_ids, r], 1),
                    torch.cat([p_att, mk.long()], 1),
                    Pm,
                    r,
                    mk,
                    logp[m, :B, :T] if with_lp else None,
                    entropy[m, :B, :T] if with_lp else None,
                )
            )
        return out

    @torch.no_grad()
    def evaluate(self, members: list[int], step: int, group: Group | None = None) -> dict:
        """Each member's ``evaluate(step)`` (its eval/ files and document), the generations batched."""
        plans = {i: self.trainers[i].eval_plan(step) for i in members}
        return self.drive(plans, group)

    # ------------------------------------------------------------------------------------ fixed-width batches
    def _fixed(self, batch: Batch) -> dict:
        """A member's batch at the population's widths: prompts left-padded to ``width``, responses right-padded
        to ``t_fix`` columns."""
        B, P, T = batch.input_ids.shape[0], batch.prompt_len, batch.responses.shape[1]
        W, Tf, pad = self.width, self.t_fix, self.tok.pad_id
        ids = torch.full((B, W + Tf), pad, dtype=torch.long, device=batch.input_ids.device)
        att = torch.zeros((B, W + Tf), dtype=torch.long, device=batch.input_ids.device)
        ids[:, W - P : W + T] = batch.input_ids
        att[:, W - P : W + T] = batch.attention_mask
        resp = torch.full((B, Tf), pad, dtype=torch.long, device=batch.input_ids.device)
        resp[:, :T] = batch.responses
        mask = torch.zeros((B, Tf), dtype=batch.mask.dtype, device=batch.mask.device)
        mask[:, :T] = batch.mask
        return {"ids": ids, "att": att, "resp": resp, "mask": mask, "T": T}

    def _stack(self, fixed: dict, rows: dict, order: list):
        """(ids, att, resp, mask) of shape (len(order), self.rows, ...) from each member's rows (padding rows
        after them)."""
        R, L, pad = self.rows, self.width + self.t_fix, self.tok.pad_id
        G = len(order)
        ids = torch.full((G, R, L), pad, dtype=torch.long, device=self.device)
        att = torch.zeros((G, R, L), dtype=torch.long, device=self.device)
        resp = torch.full((G, R, self.t_fix), pad, dtype=torch.long, device=self.device)
        mask = torch.zeros((G, R, self.t_fix), device=self.device)
        for k, g in enumerate(order):
            f, r = fixed[g], rows[g]
            n = r.shape[0]
            ids[k, :n], att[k, :n], resp[k, :n], mask[k, :n] = f["ids"][r], f["att"][r], f["resp"][r], f["mask"][r]
        return ids, att, resp, mask

    def _forward(self, dec, params: FlatParams, order, fixed, rows, temperature, with_entropy, logits=False):
        """Log-probs (and entropy, or logits) of each listed member's rows under the members' own weights."""
        sub = dec.with_params(params)
        ids, att, resp, mask = self._stack(fixed, rows, order)
        z = sub.response_logits(ids, att, self.t_fix)
        lp, ent = logprobs_from_logits(z, resp, mask, temperature, with_entropy)
        return (lp, ent, z) if logits else (lp, ent)

    @staticmethod
    def _subset(params: FlatParams, pos: list[int], grad: bool) -> FlatParams:
        """``params`` of the group positions ``pos`` (differentiable into the group's buffer when ``grad``)."""
        return params.subset(pos, grad)

    def _chunked(self, dec, params, positions, fixed, temperature, with_entropy, logits=False):
        """No-grad forward of every row of each member (in micro-batch chunks); per position (lp, ent[, logits])
        at the member's own width."""
        out = {g: [] for g in positions}
        R = self.cfg0.micro_batch_size
        n = {g: fixed[g]["ids"].shape[0] for g in positions}
        with torch.no_grad():
            for s in range(0, max(n.values()), R):
                order = [g for g in positions if s < n[g]]
                rows = {g: torch.arange(s, min(s + R, n[g]), device=self.device) for g in order}
                res = self._forward(
                    dec, self._subset(params, order, False), order, fixed, rows, temperature, with_entropy, logits
                )
                for k, g in enumerate(order):
                    r, T = rows[g].shape[0], fixed[g]["T"]
                    out[g].append(tuple(None if x is None else x[k, :r, :T] for x in res))
        return {
            g: tuple(None if parts[0][j] is None else torch.cat([p[j] for p in parts]) for j in range(len(parts[0])))
            for g, parts in out.items()
        }

    # ------------------------------------------------------------------------------------ one step
    def train_step(self, group: Group, step: int) -> dict:
        members = [i for i in group.members if i not in self.failed]
        ros = self.drive({i: self.trainers[i].rollout_plan(step) for i in members}, group)
        t0 = time.time()
        self.cfg0 = cfg = self.trainers[members[0]].cfg.train
        metrics, work = {}, {}
        for g, i in enumerate(group.members):
            if i not in ros:
                continue
            t, ro = self.trainers[i], ros[i]
            metrics[i] = dict(ro["metrics"])
            metrics[i]["lr"] = t.opt.param_groups[0]["lr"]
            if ro["batch"] is None:  # every group filtered out: nothing to learn from this step
                metrics[i]["update/skipped"] = 1
                continue
            b = ro["batch"]
            per_resp = t._rollout_metrics(b.mask, b.logp, b.entropy, metrics[i])
            work[g] = {"i": i, "batch": b, "old": b.logp, "ent": b.entropy, "per_resp": per_resp, "ro": ro}
            work[g]["fixed"] = self._fixed(b)
        if work:
            self._auxiliary(group, work, metrics)
            for w in work.values():
                t, b = self.trainers[w["i"]], w["batch"]
                if w["i"] in self.failed:
                    continue
                extras = dict(w.get("extras", {}))
                if "entropy" in t.method.estimator_extras():
                    extras["entropy"] = w["ent"].cpu()
                try:
                    adv = t.method.advantages(w["ro"]["scores"], w["ro"]["group_ids"], b.mask.cpu(), **extras)
                    w["adv"] = adv.to(t.device)
                    t._covariance_metrics(w["adv"], w["old"], w["ent"], b.mask, metrics[w["i"]])
                except Exception as e:  # noqa: BLE001 - that member fails, the others go on
                    self.fail(w["i"], e)
            work = {g: w for g, w in work.items() if w["i"] not in self.failed}
            positions = sorted(work)
            fixed = {g: w["fixed"] for g, w in work.items()}
            self._old_entropy(group, work, positions, fixed)
            if cfg.entropy_after_update and positions:
                res = self._chunked(group.dec, group.params, positions, fixed, 1.0, False, logits=True)
                for g in positions:
                    work[g]["logits_before"] = res[g][2].float()
            self._update(group, step, work, metrics)
            if cfg.entropy_after_update:
                positions = [g for g in positions if work[g]["i"] not in self.failed]
                if positions:
                    res = self._chunked(group.dec, group.params, positions, fixed, 1.0, True, logits=True)
                    for g in positions:
                        w, m = work[g], metrics[work[g]["i"]]
                        m.update(entropy_change(res[g][1], w["batch"].mask, w["per_resp"]))
                        m["cov/first_order"] = first_order_delta(w["logits_before"], res[g][2].float(), w["batch"].mask)
        elapsed = time.time() - t0
        for i in metrics:
            self.trainers[i].timing["update_s"] += elapsed
        return {i: m for i, m in metrics.items() if i not in self.failed}

    def _old_entropy(self, group: Group, work: dict, positions: list, fixed: dict) -> None:
        """``work[g]["old_ent"]`` for members whose method ``needs_old_entropy``: the behaviour policy's token entropy
        at the training temperature (``PocketTrainer._old_entropy``: the T=1 entropy of the sampling pass at T=1,
        else a no-grad forward at the temperature)."""
        need = [g for g in positions if self.trainers[work[g]["i"]].method.needs_old_entropy]
        if not need:
            return
        if self.cfg0.temperature == 1.0:
            for g in need:
                work[g]["old_ent"] = work[g]["ent"]
            return
        res = self._chunked(group.dec, group.params, need, fixed, self.cfg0.temperature, True)
        for g in need:
            work[g]["old_ent"] = res[g][1]

    def _auxiliary(self, group: Group, work: dict, metrics: dict) -> None:
        """The auxiliary model's extras (PRIME: implicit PRM and frozen reference log-probs) and its update."""
        aux = [g for g in group.aux if g in work]
        if not aux:
            return
        cfg = self.cfg0
        apos = {g: group.aux.index(g) for g in aux}
        fixed = {apos[g]: work[g]["fixed"] for g in aux}
        order = [apos[g] for g in aux]
        ref = self._chunked(group.ref_dec, group.ref_dec.flat, order, fixed, cfg.temperature, False)
        for g in aux:
            work[g]["ref_lp"] = ref[apos[g]][0]
        before = [g for g in aux if self.trainers[work[g]["i"]].aux.update == "before"]
        after = [g for g in aux if g not in before]
        if before:
            self._aux_update(group, work, before, apos, metrics)
        lp = self._chunked(group.aux_dec, group.aux_params, order, fixed, cfg.temperature, False)
        for g in aux:
            t = self.trainers[work[g]["i"]]
            model_key, ref_key = t.aux.provides
            work[g]["extras"] = {model_key: lp[apos[g]][0].cpu(), ref_key: work[g]["ref_lp"].cpu()}
        if after:
            self._aux_update(group, work, after, apos, metrics)

    def _aux_update(self, group: Group, work: dict, members: list, apos: dict, metrics: dict) -> None:
        """One optimizer step of each listed member's auxiliary model on its loss (``PocketTrainer._aux_update``)."""
        cfg, opt = self.cfg0, group.aux_opt
        opt.zero_grad()
        mb = cfg.micro_batch_size
        sizes = {g: work[g]["batch"].input_ids.shape[0] for g in members}
        totals = dict.fromkeys(members, 0.0)
        fixed = {apos[g]: work[g]["fixed"] for g in members}
        for s in range(0, max(sizes.values()), mb):
            order = [g for g in members if s < sizes[g]]
            rows = {apos[g]: torch.arange(s, min(s + mb, sizes[g]), device=self.device) for g in order}
            params = self._subset(group.aux_params, [apos[g] for g in order], True)
            lp, _ = self._forward(group.aux_dec, params, [apos[g] for g in order], fixed, rows, cfg.temperature, False)
            loss_sum = None
            for k, g in enumerate(order):
                t, b = self.trainers[work[g]["i"]], work[g]["batch"]
                r, T = rows[apos[g]].shape[0], b.responses.shape[1]
                sl = slice(s, s + r)
                sub_mask = b.mask[sl]
                loss = t.aux.loss(
                    lp[k, :r, :T],
                    work[g]["ref_lp"][sl],
                    sub_mask,
                    work[g]["ro"]["scores"][sl].to(self.device),
                    beta=t.aux.beta,
                )
                part = loss * r / sizes[g]
                loss_sum = part if loss_sum is None else loss_sum + part
                totals[g] += float(loss.detach()) * r / sizes[g]
            loss_sum.backward()
        clip = [self.trainers[work[g]["i"]].aux.grad_clip for g in members]
        if len(set(clip)) > 1:
            raise ValueError("population: members' auxiliary models clip gradients differently")
        opt.clip_(clip[0])
        active = [False] * opt.params.members
        for g in members:
            active[apos[g]] = True
        opt.step(active)
        for g in members:
            t = self.trainers[work[g]["i"]]
            metrics[work[g]["i"]][f"{t.aux.name}/loss"] = totals[g]

    def _update(self, group: Group, step: int, work: dict, metrics: dict) -> None:
        """Each member's ``_update``: its shuffle, mini-batches, selection plans, micro-batch losses, clipping and
        optimizer step, the forwards and backwards of all members batched."""
        cfg, dec, opt = self.cfg0, group.dec, group.opt
        positions = sorted(work)
        if not positions:
            return
        U, mb = cfg.updates_per_rollout, cfg.micro_batch_size
        st = {}
        for g in positions:
            w = work[g]
            B = w["batch"].input_ids.shape[0]
            perm = torch.randperm(B, generator=make_generator(self.trainers[w["i"]].cfg.seed, step, "shuffle"))
            st[g] = {
                "minis": torch.tensor_split(perm.to(self.device), U),
                "g_method": make_generator(self.trainers[w["i"]].cfg.seed, step, "method"),
                "sums": {},
                "tokens": 0.0,
                "sel": 0.0,
                "norms": [],
            }
        fixed = {g: work[g]["fixed"] for g in positions}
        for u in range(U):
            alive = [g for g in positions if work[g]["i"] not in self.failed]
            act = [g for g in alive if len(st[g]["minis"][u]) > 0]
            if not act:
                continue
            for g in act:
                self.trainers[work[g]["i"]].method.begin_mini_batch(work[g]["batch"].mask[st[g]["minis"][u]])
            plans = self._plans(group, step, work, st, act, u, fixed)
            penalty = {g: [] for g in act} if u == 0 else None  # each member's penalty gradient (first mini-batch)
            opt.zero_grad()
            mini_sums = {g: {} for g in act}
            n_micro = {g: -(-len(st[g]["minis"][u]) // mb) for g in act}
            for j in range(max(n_micro.values())):
                order = [g for g in act if j < n_micro[g] and work[g]["i"] not in self.failed]
                if not order:
                    continue
                rows = {g: st[g]["minis"][u][j * mb : (j + 1) * mb] for g in order}
                need_ent = any(self.trainers[work[g]["i"]].method.needs_entropy for g in order)
                params = self._subset(group.params, order, True)
                lp, ent = self._forward(dec, params, order, fixed, rows, cfg.temperature, need_ent)
                total = None
                for k, g in enumerate(order):
                    w, t = work[g], self.trainers[work[g]["i"]]
                    m, b = t.method, w["batch"]
                    mini_rows = st[g]["minis"][u]
                    r, T = rows[g].shape[0], b.responses.shape[1]
                    sl = slice(j * mb, j * mb + r)
                    micro_mask, mini_mask = b.mask[rows[g]], b.mask[mini_rows]
                    extra = {"old_entropy": w["old_ent"][rows[g]]} if "old_ent" in w else {}
                    try:
                        out = m.policy_loss(
                            lp[k, :r, :T],
                            w["old"][mini_rows][sl],
                            w["adv"][mini_rows][sl],
                            micro_mask,
                            entropy=ent[k, :r, :T] if m.needs_entropy else None,
                            step=step,
                            generator=st[g]["g_method"],
                            selected=plans[g][sl] if plans.get(g) is not None else None,
                            rollout_log_probs=w["old"][mini_rows][sl],  # the sampling pass's: the old ones too
                            **extra,
                        )
                    except Exception as e:  # noqa: BLE001 - e.g. a non-finite loss: that member fails alone
                        self.fail(w["i"], e)
                        continue
                    old_micro, old_mini = w["old"][mini_rows][sl], w["old"][mini_rows]
                    weight = ops.micro_batch_weight(  # the masks the aggregation divides by (rejected: drop)
                        m.agg,
                        m.aggregation_mask(micro_mask, old_micro, old_micro),
                        m.aggregation_mask(mini_mask, old_mini, old_mini),
                    )
                    if penalty is not None and out.penalty is not None:
                        add_grads(penalty[g], out.penalty * weight, list(group.params.views().values()), g)
                    part = out.loss * weight
                    total = part if total is None else total + part
                    n_tok = float(micro_mask.sum())
                    st[g]["tokens"] += n_tok
                    st[g]["sel"] += add_loss_metrics(mini_sums[g], out.metrics, n_tok, f"{m.name}/")
                if total is not None:
                    total.backward()
            norms = opt.clip_(cfg.grad_clip)
            active = [False] * opt.params.members
            for g in act:
                if work[g]["i"] in self.failed:
                    continue
                gn = norms[g]
                if gn != gn or gn in (float("inf"), float("-inf")):
                    self.fail(
                        work[g]["i"],
                        nonfinite_gradient(self.trainers[work[g]["i"]].method.name, gn, step, mini_sums[g]),
                    )
                    continue
                st[g]["norms"].append(gn)
                if penalty and penalty[g]:
                    st[g]["penalty/grad_norm"] = grad_norm(penalty[g])
                for k, v in mini_sums[g].items():
                    st[g]["sums"][k] = st[g]["sums"].get(k, 0.0) + v
                active[g] = True
            opt.step(active)
        for g in positions:
            i = work[g]["i"]
            if i not in self.failed:
                s = st[g]
                metrics[i].update(update_metrics(s["sums"], s["tokens"], s["sel"], s["norms"]))
                if "penalty/grad_norm" in s:
                    metrics[i]["penalty/grad_norm"] = s["penalty/grad_norm"]

    def _plans(self, group, step, work, st, act, u, fixed) -> dict:
        """Selection plans of the members whose method needs one (over the whole mini-batch, current weights)."""
        need = [g for g in act if self.trainers[work[g]["i"]].method.needs_global_plan]
        if not need:
            return {}
        mb = self.cfg0.micro_batch_size
        mini = {g: st[g]["minis"][u] for g in need}
        sub_fixed = {g: {k: (v[mini[g]] if torch.is_tensor(v) else v) for k, v in fixed[g].items()} for g in need}
        n = {g: mini[g].shape[0] for g in need}
        parts = {g: [] for g in need}
        with torch.no_grad():
            for s in range(0, max(n.values()), mb):
                order = [g for g in need if s < n[g]]
                rows = {g: torch.arange(s, min(s + mb, n[g]), device=self.device) for g in order}
                want_ent = any(self.trainers[work[g]["i"]].method.needs_entropy for g in order)
                params = self._subset(group.params, order, False)
                lp, ent = self._forward(group.dec, params, order, sub_fixed, rows, self.cfg0.temperature, want_ent)
                for k, g in enumerate(order):
                    r, T = rows[g].shape[0], fixed[g]["T"]
                    parts[g].append((lp[k, :r, :T], None if ent is None else ent[k, :r, :T]))
        plans = {}
        for g in need:
            w, t = work[g], self.trainers[work[g]["i"]]
            cur = torch.cat([p[0] for p in parts[g]])
            cur_ent = torch.cat([p[1] for p in parts[g]]) if t.method.needs_entropy else None
            b = w["batch"]
            plans[g] = t.method.selection_plan(
                cur, w["old"][mini[g]], w["adv"][mini[g]], b.mask[mini[g]], entropy=cur_ent, generator=st[g]["g_method"]
            )
        return plans
