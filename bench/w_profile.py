"""Where workload W's decode and update time goes, on one device (issue 36, items 1-2: profile first).

Builds W exactly as ``bench/grpo_step.py`` does (its defaults: 16 x 8 sequences, 256 + 256 tokens, the
harness core with its CUDA-graph decode), runs ``--warm-steps`` whole GRPO steps, then measures:

decode
  * every decode step of one warm rollout timed with CUDA events around its graph replay (the prefill too);
  * one rollout's first ``--graph-profiled`` replays under torch.profiler: the kernels a replay runs, their
    count and device time (``decode-graph`` table);
  * ``--eager-steps`` decode steps of the same rollout run eagerly (same kernels, launched from Python) under
    torch.profiler with a named range around every module: each kernel is charged to its innermost module
    (exclusive) and to every enclosing one (inclusive), which gives the kernel count per layer and the shares
    of attention, router, experts, norms, output head and sampler (``decode-eager`` tables);
  * decode-step time at other batch sizes (``--decode-batches``, prompts x 8): what a larger batch per graph buys;
  * the bytes one step must read (weights touched, KV cache) against the measured copy bandwidth.

update
  * one update timed piecewise with CUDA events (decoder forward, backward, clip, optimizer step; the rest is
    the output head's chunks, the loss and bookkeeping);
  * one update under torch.profiler, kernels grouped into classes by name (grouped GEMM of the experts, dense
    GEMM, attention, optimizer, compiled Triton, elementwise, ...), with the GEMMs' FLOPs and achieved rates.

Writes ``<out>/w-profile.json`` (every figure) and ``<out>/w-profile-tables.txt`` (the profiler tables);
``--preset w-long`` profiles W-long instead (``w-profile-w-long.*``).

    python bench/w_profile.py --out DIR                       # CUDA: W
    python bench/w_profile.py --tiny --device cpu --out DIR   # the script itself (static eager decode on CPU)
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT), str(ROOT / "bench")):
    if p not in sys.path:
        sys.path.insert(0, p)

import grpo_step as gs  # noqa: E402 - bench/ beside this
import torch  # noqa: E402
from w_profiler import (  # noqa: E402 - bench/ beside this
    Clock,
    ModuleRanges,
    attribute,
    busy_us,
    class_totals,
    device_kernels,
    kernel_table,
    start_profiler,
)


# ----------------------------------------------------------------------------- the measured decoder
class DecodeProbe:
    """Replaces ``StaticDecoder.run`` / ``prefill`` for the probe's rollouts: same steps, same order, timed."""

    def __init__(self, clock: Clock, device: torch.device) -> None:
        from harness.core import decode

        self.decode, self.clock, self.device = decode, clock, device
        self.orig_run, self.orig_prefill = decode.StaticDecoder.run, decode.StaticDecoder.prefill
        self.mode = "time"  # time | graph_profile | eager_profile
        self.graph_profiled, self.eager_steps, self.eager_warm = 64, 4, 2
        self.result: dict[str, Any] = {}
        self.prof: Any = None
        self.model: torch.nn.Module | None = None
        probe = self

        def prefill(dec: Any, *a: Any, **k: Any) -> None:
            t0 = clock.mark()
            probe.orig_prefill(dec, *a, **k)
            probe.result["prefill_ms"] = clock.ms(t0, clock.mark())

        def run(dec: Any, *, run_to_length: bool, check_every: int) -> tuple[Any, Any, Any]:
            return probe.run(dec, run_to_length=run_to_length, check_every=check_every)

        decode.StaticDecoder.prefill = prefill
        decode.StaticDecoder.run = run

    def restore(self) -> None:
        self.decode.StaticDecoder.run, self.decode.StaticDecoder.prefill = self.orig_run, self.orig_prefill

    def one(self, dec: Any) -> None:
        if dec.graph is not None:
            dec.graph.replay()
        else:
            dec._step()  # noqa: SLF001 - the eager step (CPU, or no graph)

    def run(self, dec: Any, *, run_to_length: bool, check_every: int) -> tuple[Any, Any, Any]:
        s, clock = dec.state, self.clock
        marks, eager_ms = [], []
        ranges = None
        for t in range(1, dec.R):
            if not run_to_length and not dec.ignore_eos and t % check_every == 0 and not bool(s.alive.any()):
                break
            if self.mode == "graph_profile" and t == 1:
                clock.sync()
                self.prof = start_profiler(self.device)
            if self.mode == "eager_profile" and t <= self.eager_warm + self.eager_steps:
                if t == self.eager_warm + 1:
                    ranges = ModuleRanges(self.model)
                    clock.sync()
                    self.prof = start_profiler(self.device)
                clock.sync()
                t0 = time.perf_counter()
                with torch.profiler.record_function("decode_step"):
                    dec._step()  # noqa: SLF001 - eagerly, the kernels a replay runs
                clock.sync()
                eager_ms.append((time.perf_counter() - t0) * 1e3)
                if t == self.eager_warm + self.eager_steps:
                    self.prof.__exit__(None, None, None)
                    ranges.remove()
                continue
            a = clock.mark()
            with torch.profiler.record_function("replay"):
                self.one(dec)
            marks.append((a, clock.mark()))
            if self.mode == "graph_profile" and t == self.graph_profiled:
                clock.sync()
                self.prof.__exit__(None, None, None)
        clock.sync()
        step_ms = [clock.ms(a, b) for a, b in marks]
        self.result.update(step_ms=step_ms, eager_ms=eager_ms, graph=dec.graph is not None, batch=s.tok.shape[0],
                           cache_len=dec.P + dec.R)
        return s.responses.clone(), s.resp_mask.clone(), s.logps.clone()


# ----------------------------------------------------------------------------- W
def build(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    from harness.core.data import EncodedPrompt, Example
    from harness.core.trainer import GRPOTrainer
    from harness.core.typed_recipe import Recipe

    bargs = gs.parse_args(["--preset", args.preset] + (["--tiny"] if args.tiny else []))
    wl = gs.workload(bargs, device)
    peak = gs.measure_peak_tflops(device)
    cfg, source = gs.build_cfg(wl, device, bargs.micro or (4 if args.tiny else None),
                               bargs.logprob_micro or (8 if args.tiny else None), False)
    tr = GRPOTrainer(Recipe.model_validate(cfg), device=device, peak_tflops=peak)
    if device.type != "cuda":
        tr.decode_engine = "static"  # the CPU check exercises the static decoder the probe wraps
    prompts = gs.make_prompts(tr.tok, bargs.prompts * 4, bargs.prompt_len)  # enough for the largest batch
    batch = [EncodedPrompt(ids, None, None, Example(uid=f"bench-{i:04d}", data_source="bench", question="",
                                                    answer=""))
             for i, ids in enumerate(prompts)]
    return dict(bargs=bargs, wl=wl, peak=peak, cfg=cfg, source=source, tr=tr, batch=batch)


def grpo_step(w: dict[str, Any], step: int, *, update_hook: Callable[[], Any] | None = None) -> dict[str, float]:
    """One whole GRPO step of W as grpo_step.run_ours does it (wall times per phase)."""
    from harness.core import algos
    from harness.core.update import attach_positions, batched_logprobs, is_on_policy, update_actor

    tr, bargs, dev = w["tr"], w["bargs"], w["tr"].device
    B = bargs.prompts * bargs.n
    micro = w["cfg"]["actor_rollout_ref"]["actor"]["ppo_micro_batch_size_per_gpu"]
    lp_micro = w["cfg"]["actor_rollout_ref"]["rollout"]["log_prob_micro_batch_size_per_gpu"]
    lp_kw = dict(bias=tr.bias, temperature=tr.loss_cfg.temperature, image_pad_id=tr.ids["image_pad"])
    gs.sync(dev)
    t0 = time.perf_counter()
    rb = tr.rollout(w["batch"][:bargs.prompts], step=step, n=bargs.n, sampling=tr.rollout_cfg, ignore_eos=True)
    gs.sync(dev)
    t1 = time.perf_counter()
    scores = gs.even_fraction(rb.response_ids, rb.response_mask)
    adv = algos.get_adv_estimator("grpo")(scores, rb.group_ids, rb.response_mask, eps=1e-6, norm_by_std=True)
    rb.tensors.update(advantages=adv, scores=scores)
    attach_positions(tr.models.actor, rb, tr.ids["image_pad"])
    on_policy = is_on_policy(rb.size, B, 1)
    if not on_policy:
        rb.tensors["old_logp"] = batched_logprobs(tr.models.actor, rb, lp_micro, **lp_kw)
    rb.tensors["ref_logp"] = batched_logprobs(tr.models.ref, rb, lp_micro, **lp_kw)
    gs.sync(dev)
    t2 = time.perf_counter()
    tr.models.actor.train()
    ctx = update_hook() if update_hook else None
    if ctx is not None:
        ctx.__enter__()
    try:
        update_actor(tr.models.actor, tr.optimizer, tr.scheduler, rb, cfg=tr.loss_cfg, mini_size=B, micro_size=micro,
                     epochs=1, clip_grad=gs.CLIP_GRAD, bias=tr.bias, image_pad_id=tr.ids["image_pad"],
                     on_policy=on_policy)
        gs.sync(dev)
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
    t3 = time.perf_counter()
    return {"step": step, "gen_s": t1 - t0, "logprob_s": t2 - t1, "update_s": t3 - t2, "total_s": t3 - t0}


class UpdateTimer:
    """CUDA events around the decoder's forwards, every backward, the clip and the optimizer step of one update."""

    def __init__(self, w: dict[str, Any], clock: Clock) -> None:
        self.w, self.clock = w, clock
        self.spans: dict[str, list[tuple[Any, Any]]] = collections.defaultdict(list)

    def __enter__(self) -> UpdateTimer:
        clock, spans, tr = self.clock, self.spans, self.w["tr"]
        decoder = tr.models.actor.model
        self._open: list[Any] = []
        self.handles = [decoder.register_forward_pre_hook(lambda *_: self._open.append(clock.mark())),
                        decoder.register_forward_hook(lambda *_: spans["decoder forward"].append(
                            (self._open.pop(), clock.mark())))]
        self.orig_backward = torch.Tensor.backward
        self.orig_clip = torch.nn.utils.clip_grad_norm_
        self.orig_opt_step = tr.optimizer.step
        orig_backward, orig_clip, orig_opt_step = self.orig_backward, self.orig_clip, self.orig_opt_step

        def timed(key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
            def inner(*a: Any, **k: Any) -> Any:
                t0 = clock.mark()
                out = fn(*a, **k)
                spans[key].append((t0, clock.mark()))
                return out
            return inner

        torch.Tensor.backward = timed("backward (whole graph)", orig_backward)
        torch.nn.utils.clip_grad_norm_ = timed("clip_grad_norm_", orig_clip)
        tr.optimizer.step = timed("optimizer step", orig_opt_step)
        self.t0 = clock.mark()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.t1 = self.clock.mark()
        for h in self.handles:
            h.remove()
        torch.Tensor.backward = self.orig_backward
        torch.nn.utils.clip_grad_norm_ = self.orig_clip
        self.w["tr"].optimizer.step = self.orig_opt_step

    def summary(self) -> dict[str, Any]:
        total = self.clock.ms(self.t0, self.t1)
        out = {k: {"ms": sum(self.clock.ms(a, b) for a, b in v), "calls": len(v)} for k, v in self.spans.items()}
        out["rest (output-head chunks forward, loss, metrics, zero_grad)"] = {
            "ms": total - sum(v["ms"] for v in out.values()), "calls": 0}
        out["update total"] = {"ms": total, "calls": 1}
        return out


def decode_bytes(w: dict[str, Any], batch: int, cache_len: int) -> dict[str, float]:
    """The fewest bytes one decode step must read (bf16 weights touched once, the whole static KV cache)."""
    wl, model = w["wl"], w["tr"].models.actor
    el = next(model.parameters()).element_size()
    H, L, E, K, Im, V = wl["hidden"], wl["layers"], wl["experts"], wl["top_k"], wl["moe_inter"], wl["vocab"]
    p_expected = E * (1 - (1 - K / E) ** batch)  # experts a layer's batch touches (uniform routing)
    experts = L * p_expected * 3 * H * Im * el
    attn = L * (H * wl["heads"] * wl["head_dim"] * 2 + H * wl["kv_heads"] * wl["head_dim"] * 2) * el
    router = L * E * H * el
    head = V * H * el
    kv = L * batch * cache_len * wl["kv_heads"] * wl["head_dim"] * 2 * el
    logits = batch * V * 4  # the float32 logits, once
    return {"experts": experts, "attention_projections": attn, "router": router, "output_head": head,
            "kv_cache": kv, "logits_fp32_once": logits, "experts_touched_per_layer": p_expected,
            "total": experts + attn + router + head + kv + logits}


def copy_bandwidth(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    x = torch.empty(2 << 30, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(10):
        y.copy_(x)
    b.record()
    b.synchronize()
    bw = 2 * x.numel() * 10 / (a.elapsed_time(b) / 1e3) / 1e12  # read + write, TB/s
    del x, y
    torch.cuda.empty_cache()
    return bw


def update_flops(w: dict[str, Any]) -> dict[str, float]:
    """Matrix FLOPs of one update (forward + backward = 3 x forward), by GEMM kind."""
    wl = w["wl"]
    B = wl["prompts"] * wl["n"]
    T, Tr = B * (wl["prompt_len"] + wl["response_len"]), B * wl["response_len"]
    H, L, E, K, Im, V = wl["hidden"], wl["layers"], wl["experts"], wl["top_k"], wl["moe_inter"], wl["vocab"]
    q, kv = wl["heads"] * wl["head_dim"], wl["kv_heads"] * wl["head_dim"]
    S = wl["prompt_len"] + wl["response_len"]
    f = {
        "experts (grouped)": 6 * T * L * K * 3 * H * Im,
        "attention projections": 6 * T * L * (H * (q + 2 * kv) + q * H),
        "router": 6 * T * L * H * E,
        "output head (response tokens)": 6 * Tr * H * V,
        "attention scores (causal)": 3 * L * B * 2 * 2 * S * S / 2 * q,
    }
    f["total"] = sum(f.values())
    return f


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--preset", choices=tuple(gs.PRESETS), default="w", help="grpo_step.py's workload preset")
    p.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    p.add_argument("--warm-steps", type=int, default=2)
    p.add_argument("--graph-profiled", type=int, default=64, help="decode replays under the profiler")
    p.add_argument("--eager-steps", type=int, default=4, help="eager decode steps under the profiler")
    p.add_argument("--decode-batches", default="8,32", help="prompts (x 8 samples) for the decode-batch sweep")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = gs.pick_device(args.device)
    torch.manual_seed(gs.SEED)
    clock = Clock(device)
    res: dict[str, Any] = {"gpu": gs.gpu_name(device), "versions": gs.versions()}
    tables: list[str] = []
    t_start = time.perf_counter()
    res["copy_bandwidth_tb_s"] = copy_bandwidth(device)
    w = build(args, device)
    tr, bargs = w["tr"], w["bargs"]
    res.update(workload=w["wl"], peak_tflops_measured=w["peak"], decode_engine=tr.decode_engine,
               n_params=tr.models.n_params, n_active_params=tr.models.n_active_params)
    print(f"[profile] built W in {time.perf_counter() - t_start:.1f} s; engine {tr.decode_engine}", flush=True)

    probe = DecodeProbe(clock, device)
    probe.model = tr.models.actor
    probe.graph_profiled = min(args.graph_profiled, bargs.response_len - 1)
    probe.eager_steps = min(args.eager_steps, bargs.response_len - 3)
    try:
        # ---- warm whole steps (graph captured, head compiled), timed like grpo_step
        res["warm_steps"] = []
        for step in range(args.warm_steps):
            probe.mode = "time"
            r = grpo_step(w, step)
            res["warm_steps"].append(r)
            print(f"[profile] warm step {step}: {r}", flush=True)
        # ---- decode: timed rollout
        probe.mode, probe.result = "time", {}
        gs.sync(device)
        t0 = time.perf_counter()
        tr.rollout(w["batch"][:bargs.prompts], step=100, n=bargs.n, sampling=tr.rollout_cfg, ignore_eos=True)
        gs.sync(device)
        gen_s = time.perf_counter() - t0
        st = probe.result["step_ms"]
        res["decode"] = {
            "gen_wall_s": gen_s, "prefill_ms": probe.result["prefill_ms"], "steps": len(st),
            "step_ms_median": statistics.median(st), "step_ms_mean": statistics.fmean(st),
            "step_ms_min": min(st), "step_ms_max": max(st), "replays_sum_s": sum(st) / 1e3,
            "graph": probe.result["graph"], "batch": probe.result["batch"], "cache_len": probe.result["cache_len"],
            "step_ms_every_32": st[::32],
        }
        nb = decode_bytes(w, probe.result["batch"], probe.result["cache_len"])
        res["decode"]["bytes_per_step"] = nb
        bw = res["copy_bandwidth_tb_s"]
        if bw:
            res["decode"]["bound_ms_at_measured_copy_bw"] = nb["total"] / (bw * 1e12) * 1e3
            res["decode"]["bound_ms_at_4p8_tb_s"] = nb["total"] / 4.8e12 * 1e3
            res["decode"]["achieved_tb_s"] = nb["total"] / (res["decode"]["step_ms_median"] / 1e3) / 1e12
        print(f"[profile] decode: {json.dumps(res['decode'], default=float)[:600]}", flush=True)

        # ---- decode: the graph's kernels
        probe.mode, probe.result = "graph_profile", {}
        tr.rollout(w["batch"][:bargs.prompts], step=101, n=bargs.n, sampling=tr.rollout_cfg, ignore_eos=True)
        prof = probe.prof
        kern = device_kernels(prof)
        replays = probe.graph_profiled
        if kern:
            text, rows = kernel_table(kern, replays)
            span = (max(k.time_range.end for k in kern) - min(k.time_range.start for k in kern)) / replays
            res["decode_graph"] = {"replays": replays, "kernels_per_replay": len(kern) / replays,
                                   "kernel_us_per_replay": sum(r["us"] for r in rows),
                                   "busy_us_per_replay": busy_us(kern) / replays, "span_us_per_replay": span,
                                   "classes": class_totals(rows), "top": rows[:40]}
            tables.append(f"== decode: kernels of one CUDA-graph replay (mean over {replays} replays of a warm "
                          f"rollout, batch {bargs.prompts * bargs.n}, cache {probe.result['cache_len']})\n"
                          f"kernels per replay {len(kern) / replays:.1f}; kernel time {sum(r['us'] for r in rows):.1f}"
                          f" us; busy {busy_us(kern) / replays:.1f} us; first-to-last {span:.1f} us per replay\n"
                          + text)
        else:
            res["decode_graph"] = {"note": "no device kernels in the profile (CPU, or graph kernels not traced)"}
        tables.append("== decode: profiler table of the graph replays (key_averages, by self device time)\n"
                      + prof.key_averages().table(sort_by="self_device_time_total" if device.type == "cuda"
                                                  else "self_cpu_time_total", row_limit=40))

        # ---- decode: eager steps with module ranges
        probe.mode, probe.result = "eager_profile", {}
        tr.rollout(w["batch"][:bargs.prompts], step=102, n=bargs.n, sampling=tr.rollout_cfg, ignore_eos=True)
        prof = probe.prof
        att = attribute(prof, probe.eager_steps)
        res["decode_eager"] = {"steps": probe.eager_steps, "eager_step_ms": probe.result["eager_ms"], **att}
        layers = w["wl"]["layers"]
        if "layer" in att["inclusive"]:
            res["decode_eager"]["kernels_per_layer"] = att["inclusive"]["layer"]["kernels"] / layers
        lines = [f"== decode: one eager decode step, kernels charged to modules (mean of {probe.eager_steps} steps; "
                 f"{layers} layers; the same kernels a replay runs, launched from Python)",
                 f"{'us':>10} {'kernels':>8}  module (exclusive: innermost range)"]
        ex_total = sum(v["us"] for v in att["exclusive"].values()) or 1.0
        for k, v in att["exclusive"].items():
            lines.append(f"{v['us']:10.1f} {v['kernels']:8.1f}  {k} ({100 * v['us'] / ex_total:.1f}%)")
        lines.append(f"{ex_total:10.1f} {sum(v['kernels'] for v in att['exclusive'].values()):8.1f}  total")
        lines.append(f"\n{'us':>10} {'kernels':>8}  module (inclusive, summed over layers)")
        for k, v in att["inclusive"].items():
            lines.append(f"{v['us']:10.1f} {v['kernels']:8.1f}  {k}")
        lines.append("\nkernel names per module (count over the profiled steps):")
        for k, names in att["kernel_names"].items():
            lines.append(f"  {k}: " + "; ".join(f"{n[:90]} x{c}" for n, c in names.items()))
        tables.append("\n".join(lines))
        ek = device_kernels(prof)
        if ek:
            text, rows = kernel_table(ek, probe.eager_steps)
            tables.append(f"== decode: kernels of one eager step (mean of {probe.eager_steps})\n" + text)

        # ---- decode: other batch sizes per graph
        res["decode_batches"] = []
        for prompts in [int(x) for x in args.decode_batches.split(",") if x]:
            if prompts > len(w["batch"]):
                continue
            probe.mode = "time"
            for rep in range(2):  # the first captures the new shape's graph
                probe.result = {}
                gs.sync(device)
                t0 = time.perf_counter()
                tr.rollout(w["batch"][:prompts], step=200 + rep, n=bargs.n, sampling=tr.rollout_cfg,
                           ignore_eos=True)
                gs.sync(device)
                wall = time.perf_counter() - t0
            st = probe.result["step_ms"]
            bsz = prompts * bargs.n
            res["decode_batches"].append({"batch": bsz, "gen_wall_s": wall, "step_ms_median": statistics.median(st),
                                          "prefill_ms": probe.result["prefill_ms"],
                                          "new_tok_per_s": bsz * bargs.response_len / wall,
                                          "decode_tok_per_s": bsz / (statistics.median(st) / 1e3),
                                          "bytes_per_step": decode_bytes(w, bsz, probe.result["cache_len"])["total"]})
            print(f"[profile] decode batch {bsz}: {res['decode_batches'][-1]}", flush=True)
    finally:
        probe.restore()

    # ---- update: piecewise timing, then the profile
    timer = UpdateTimer(w, clock)
    r = grpo_step(w, 300, update_hook=lambda: timer)
    res["update_timed_step"] = r
    res["update_split_ms"] = timer.summary()
    print(f"[profile] update split: {res['update_split_ms']}", flush=True)
    holder: dict[str, Any] = {}

    class ProfUpdate:
        def __enter__(self) -> None:
            clock.sync()
            holder["prof"] = start_profiler(device)

        def __exit__(self, *exc: Any) -> None:
            clock.sync()
            holder["prof"].__exit__(None, None, None)

    r = grpo_step(w, 301, update_hook=ProfUpdate)
    res["update_profiled_step"] = r
    prof = holder["prof"]
    uk = device_kernels(prof)
    flops = update_flops(w)
    res["update_flops"] = flops
    if uk:
        text, rows = kernel_table(uk, 1, top=60)
        classes = class_totals(rows)
        span = (max(k.time_range.end for k in uk) - min(k.time_range.start for k in uk))
        res["update_profile"] = {"kernels": len(uk), "kernel_us": sum(r["us"] for r in rows), "busy_us": busy_us(uk),
                                 "span_us": span, "classes": classes, "top": rows[:40]}
        g_us = classes.get("grouped GEMM (experts)", {}).get("us", 0.0)
        d_us = classes.get("dense GEMM", {}).get("us", 0.0)
        if g_us:
            res["update_profile"]["experts_grouped_tflops"] = flops["experts (grouped)"] / (g_us / 1e6) / 1e12
        if d_us:
            dense = flops["attention projections"] + flops["router"] + flops["output head (response tokens)"]
            res["update_profile"]["dense_gemm_tflops"] = dense / (d_us / 1e6) / 1e12
        cl = "\n".join(f"{v['us'] / 1e3:10.2f} ms {100 * v['us'] / max(sum(r['us'] for r in rows), 1):5.1f}% "
                       f"{v['count']:8.0f}  {k}" for k, v in classes.items())
        tables.append(f"== update: kernels by class (one update, {len(uk)} kernels, kernel time "
                      f"{sum(r['us'] for r in rows) / 1e3:.1f} ms, busy {busy_us(uk) / 1e3:.1f} ms, first-to-last "
                      f"{span / 1e3:.1f} ms)\n{cl}")
        tables.append("== update: kernels by name (one update)\n" + text)
    tables.append("== update: profiler table (key_averages, by self device time)\n"
                  + prof.key_averages().table(sort_by="self_device_time_total" if device.type == "cuda"
                                              else "self_cpu_time_total", row_limit=50))
    res["wall_s"] = time.perf_counter() - t_start
    stem = "w-profile" if args.preset == "w" else f"w-profile-{args.preset}"
    (out / f"{stem}.json").write_text(json.dumps(res, indent=1, default=float) + "\n")
    (out / f"{stem}-tables.txt").write_text("\n\n".join(tables) + "\n")
    print(f"[profile] wrote {out / stem}.json and {out / stem}-tables.txt in {res['wall_s']:.0f} s")
    summary(res)
    return 0


def summary(res: dict[str, Any]) -> None:
    d = res.get("decode", {})
    print(f"\ndecode: {d.get('step_ms_median', 0):.3f} ms/step median over {d.get('steps')} replays, prefill "
          f"{d.get('prefill_ms', 0):.1f} ms, gen {d.get('gen_wall_s', 0):.3f} s; bound "
          f"{d.get('bound_ms_at_measured_copy_bw') or 0:.3f} ms at the copy bandwidth "
          f"({(d.get('bytes_per_step') or {}).get('total', 0) / 1e9:.2f} GB/step)")
    g = res.get("decode_graph", {})
    if "classes" in g:
        print(f"graph replay: {g['kernels_per_replay']:.0f} kernels, {g['kernel_us_per_replay']:.0f} us kernel time, "
              f"{g['span_us_per_replay']:.0f} us span")
        for k, v in list(g["classes"].items())[:8]:
            print(f"  {v['us']:8.1f} us {v['count']:6.1f}  {k}")
    e = res.get("decode_eager", {})
    for k, v in list(e.get("exclusive", {}).items())[:12]:
        print(f"  eager {v['us']:8.1f} us {v['kernels']:6.1f} kernels  {k}")
    if "kernels_per_layer" in e:
        print(f"kernels per layer (eager): {e['kernels_per_layer']:.1f}")
    for b in res.get("decode_batches", []):
        print(f"decode batch {b['batch']}: {b['step_ms_median']:.3f} ms/step, {b['new_tok_per_s']:,.0f} new tok/s")
    for k, v in res.get("update_split_ms", {}).items():
        print(f"update {k}: {v['ms']:.1f} ms ({v['calls']} calls)")
    u = res.get("update_profile", {})
    for k, v in list(u.get("classes", {}).items())[:10]:
        print(f"  update {v['us'] / 1e3:8.1f} ms  {k}")
    for k in ("experts_grouped_tflops", "dense_gemm_tflops"):
        if k in u:
            print(f"{k}: {u[k]:.0f}")


if __name__ == "__main__":
    sys.exit(main())
