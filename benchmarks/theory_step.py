r"""One GD step of Eq. (T) on the empirical risk (E): ours against a plain PyTorch step and the memory floor.

    python -m benchmarks.theory_step            # writes its section of docs/benchmarks.md

Measured in one process, interleaved round by round so that all see the same machine load:
- ours: the library's compiled chunk (`posattn.theory.programs.make_chunk_fn`, `--chunk` GD steps in one
  loop, the default optimiser, the one-pass step of `posattn.theory.fused` on the samples laid out as
  `fit` lays them out), time per step: on a CPU where it builds, the step's CPU kernel
  (`posattn.theory.one_pass_kernel`) on the samples as drawn;
- ours, XLA tile loop: the same chunk on the samples laid out as tiles (`fused.tiled`), the step that
  runs where the kernel does not (accelerators, a CPU without a compiler);
- jax.grad: the same chunk with the step written as `jax.grad` of the plain model (what the library did
  before the one-pass step), time per step;
- PyTorch: the step a researcher writes by hand (softmax(A / sqrt(d)), factor D, cubic sigma, logistic
  loss, autograd, A's diagonal frozen), eager on the CPU;
- GEMV: one pass over X, X @ v (jax: `--chunk` passes in one compiled loop; PyTorch: eager; the
  faster of the two), the floor of any step that reads X from memory once;
- where XLA's tile loop (ours before the CPU kernel, and ours on accelerators) spends the time above
  the floor, by three probes that walk its tiles per device (`posattn.theory.fused.tiled`) without the
  loss: "tiles, X_j v" takes each tile out of X and
  multiplies v by it (the copy and the loop), "tiles, both products" adds the second product X_j z_j
  from cache (the tile loop adds the loss and its gradient per tile to that: its floor),
  and "one tile, both products" takes both products on each device's first tile only, as often:
  their arithmetic alone, X never leaving the cache.
Each figure is the minimum over `--rounds` rounds (the least disturbed by other jobs; the medians are
printed beside them). PyTorch is a benchmark-only extra (`pip install -e ".[bench]"`); without it its
column says so.
"""

import dataclasses
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from jax.sharding import PartitionSpec as P

from benchmarks.report import machine, update_section
from posattn import compile_options
from posattn import mesh as mesh_lib
from posattn.theory import GDConfig, TheoryConfig, fused, make_task, sample
from posattn.theory.model import empirical_risk, init_params
from posattn.theory.optim import gd_hyperparameters, gradient_descent
from posattn.theory.presets import get_preset
from posattn.theory.programs import make_chunk_fn
from posattn.theory.step import descend, init_state, make_batch

flags.DEFINE_integer("chunk", 20, "GD steps per compiled call")
flags.DEFINE_integer("rounds", 7, "interleaved timing rounds")
flags.DEFINE_integer("repeats", 3, "calls of the GEMV and of the PyTorch step per round")
flags.DEFINE_list(
    "cases",
    ["n50k", "paper"],
    "problems to time: n50k (N=50,000, D=10, d=100), paper (the "
    "paper preset), n1m (N=1,000,000, D=10, d=100: an accelerator's size)",
)
FLAGS = flags.FLAGS

try:
    import torch
except ImportError:  # the bench extra is not installed
    torch = None


def torch_device() -> str | None:
    """Where the PyTorch step runs: the platform JAX runs on (a GPU through CUDA, else the CPU); None
    where torch cannot (not installed, or JAX on a GPU that torch does not see, or on a TPU)."""
    if torch is None:
        return None
    backend = jax.default_backend()
    if backend == "cpu":
        return "cpu"
    return "cuda" if backend == "gpu" and torch.cuda.is_available() else None


def _torch_where() -> str:
    device = torch_device()
    if device is None:
        return "(not run)"
    return f"with {torch.get_num_threads()} threads" if device == "cpu" else f"on {device}"


def torch_step(X, y, A, v, *, lr: float, lr_A: float, D: int, d: int):
    """One GD step of Eq. (T) on (E), written as a PyTorch user would (autograd, in place)."""
    A.grad = v.grad = None
    S = torch.softmax(A / d**0.5, dim=-1)
    u = D * (X @ v) @ S.T
    loss = torch.nn.functional.softplus(-y * (u**3).sum(-1)).mean()
    loss.backward()
    with torch.no_grad():
        A -= lr_A * A.grad * (1 - torch.eye(D, device=A.device))  # the diagonal stays frozen
        v -= lr * v.grad
    return loss


def plain_chunk(cfg: TheoryConfig):
    """`--chunk` steps of `jax.grad` of the plain model in one compiled `lax.scan`, the library's
    optimiser (`posattn.theory.optim.gradient_descent`) on the training state `init_state` makes."""
    optimizer = gradient_descent()

    def chunk(state, X, y):
        def one_step(state, _):
            return descend(
                state, jax.grad(empirical_risk)(state["params"], X, y, cfg), optimizer
            ), None

        return jax.lax.scan(one_step, state, None, length=FLAGS.chunk)[0]

    return jax.jit(chunk)


def gemv_loop(X, v):
    """`--chunk` passes X @ v in one compiled loop (as ours runs its steps); each pass's v depends on
    the previous result, so that XLA cannot hoist the product out of the loop."""

    def one(_, z):
        return X @ (v + 1e-30 * z[0])

    return jax.lax.fori_loop(0, FLAGS.chunk, one, jnp.zeros(X.shape[0], X.dtype))


# Issue 17's goals for ours: at least this much faster than the PyTorch step, within this of one GEMV
GOAL_TORCH_RATIO, GOAL_FLOOR_RATIO = 1.5, 1.3

PROBES = {
    "tiles, X_j v": (False, False),
    "tiles, both products": (True, False),
    "one tile, both products": (True, True),
}


def tile_probe(mesh, both: bool, one_tile: bool):
    """`--chunk` passes of ours' tile loop over each device's tiles (`fused.tiled`, (k, d, m D) each)
    without the loss: z_j = v X_j per tile, with `both` the second product X_j z_j (the gradient's read
    of the tile from cache), with `one_tile` every pass over the first tile alone (the two products'
    arithmetic, X never leaving the cache)."""

    def passes(tiles, v):
        def tile_step(acc, X_j):
            X_j = tiles[0] if one_tile else X_j
            z = (
                v + 1e-30 * acc
            ) @ X_j  # depends on the last tile: nothing is hoisted out of the loop
            return acc + (X_j @ z if both else z[: acc.shape[0]]), None

        return jax.lax.fori_loop(
            0, FLAGS.chunk, lambda _, acc: jax.lax.scan(tile_step, acc, tiles)[0], jnp.zeros_like(v)
        )

    return jax.jit(
        jax.shard_map(
            passes,
            mesh=mesh,
            in_specs=(P(mesh_lib.DATA), P()),
            out_specs=P(mesh_lib.DATA),
            check_vma=False,
        )
    )  # zero start: not varying


def seconds(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        out = fn()
    if torch is not None and isinstance(out, torch.Tensor):
        if out.is_cuda:
            torch.cuda.synchronize()
    else:
        jax.block_until_ready(out)
    return (time.perf_counter() - t0) / calls


def measure(cfg: TheoryConfig, gd: GDConfig) -> dict:
    """Milliseconds per step (min and median over rounds) of ours, jax.grad, PyTorch and one GEMV."""
    mesh = mesh_lib.data_mesh()
    shards = mesh.devices.size
    task = make_task(jax.random.key(0), cfg)
    train = make_batch(*sample(jax.random.key(1), cfg, task, gd.N), shards)
    test = make_batch(*sample(jax.random.key(2), cfg, task, 1000), shards)
    tiles = fused.tiled(*train, shards)  # laid out once, as `fit` does without the kernel
    train, tiles, test = jax.device_put((train, tiles, test), mesh_lib.batch_sharding(mesh))
    params = init_params(jax.random.key(3), cfg, gd, task.w_star)
    optimizer = gradient_descent()
    state = jax.device_put(
        init_state(params, optimizer, gd_hyperparameters(gd)), mesh_lib.replicated(mesh)
    )
    key = jax.random.key(4)
    chunk = make_chunk_fn(cfg, gd, mesh, optimizer)
    ours_train = train if fused.uses_kernel(train.X.dtype, gd.implementation) else tiles
    steps = jnp.asarray(FLAGS.chunk, jnp.int32)
    t0 = time.perf_counter()
    compiled = chunk.lower(state, steps, ours_train, test, key, task).compile()
    compile_s = time.perf_counter() - t0
    # The chunk donates its state: each call gets a copy.
    run = lambda compiled, train: compiled(
        jax.tree.map(jnp.copy, state), steps, train, test, key, task
    )[1]
    ours = lambda: run(compiled, ours_train)
    tile_loop = (
        compiled
        if ours_train is tiles
        else chunk.lower(state, steps, tiles, test, key, task).compile()
    )
    plain = plain_chunk(cfg)
    jax_plain = lambda: plain(state, train.X, train.y)
    X_flat = train.X.reshape(-1, cfg.d)
    gemv = jax.jit(gemv_loop)
    candidates = {
        "ours": lambda: seconds(ours, 1) / FLAGS.chunk,
        "ours, XLA tile loop": lambda: seconds(lambda: run(tile_loop, tiles), 1) / FLAGS.chunk,
        "jax.grad": lambda: seconds(jax_plain, 1) / FLAGS.chunk,
        "GEMV (jax)": lambda: seconds(lambda: gemv(X_flat, params["v"]), 1) / FLAGS.chunk,
    }
    for name, (both, one_tile) in PROBES.items():
        probe = tile_probe(mesh, both, one_tile)
        candidates[name] = lambda probe=probe: (
            seconds(lambda: probe(tiles.X, params["v"]), 1) / FLAGS.chunk
        )
    device = torch_device()
    if device is not None:
        X_t, y_t = (torch.from_numpy(np.asarray(a)).to(device) for a in (train.X, train.y))
        A_t = torch.tensor(np.asarray(params["A"]), device=device, requires_grad=True)
        v_t = torch.tensor(np.asarray(params["v"]), device=device, requires_grad=True)
        step = lambda: torch_step(X_t, y_t, A_t, v_t, lr=gd.lr, lr_A=gd.lr_A, D=cfg.D, d=cfg.d)
        X_t_flat = X_t.reshape(-1, cfg.d)
        candidates["PyTorch"] = lambda: seconds(step, FLAGS.repeats)
        candidates["GEMV (PyTorch)"] = lambda: seconds(
            lambda: X_t_flat @ v_t.detach(), FLAGS.repeats
        )
    for fn in candidates.values():
        fn()  # warm-up (compiles the jax ones)
    times = {name: [] for name in candidates}
    for _ in range(FLAGS.rounds):
        for name, fn in candidates.items():
            times[name].append(fn() * 1e3)
    ms = {name: min(t) for name, t in times.items()}
    median = {name: statistics.median(t) for name, t in times.items()}
    gemvs = [n for n in ms if n.startswith("GEMV")]
    ms["GEMV"] = min(ms[n] for n in gemvs)
    median["GEMV"] = min(median[n] for n in gemvs)
    return {"ms": ms, "median": median, "compile_s": compile_s}


def section_body(rows, split_rows, verdicts) -> str:
    torch_version = torch.__version__ if torch is not None else "(not installed)"
    return "\n".join(
        [
            f"Full-batch GD on (E), float32. ms per step, minimum (median) over {FLAGS.rounds} interleaved "
            f"rounds; ours, its XLA tile loop and jax.grad: {FLAGS.chunk} steps per compiled call, the "
            f"library's optimiser (ours: "
            f"{'the CPU kernel' if fused.uses_kernel(jnp.float32) else 'the XLA tile loop'}, "
            f"as `fit` runs it here); PyTorch "
            f"{torch_version} eager {_torch_where()}; GEMV: one "
            f"pass X @ v over the training samples, the faster of jax and PyTorch. "
            f"Machine: {machine()}.",
            "",
            f"Command: `python -m benchmarks.theory_step --cases={','.join(FLAGS.cases)} --rounds={FLAGS.rounds} "
            f"--chunk={FLAGS.chunk}`",
            "",
            "| problem | ours (ms) | ours, XLA tile loop (ms) | jax.grad step (ms) | PyTorch step (ms) | "
            "one GEMV over X (ms) | PyTorch / ours | ours / GEMV | XLA tile loop / GEMV | jax.grad / ours | "
            "compile (s) |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Goals (issue 17): PyTorch / ours >= {GOAL_TORCH_RATIO} and ours / GEMV <= {GOAL_FLOOR_RATIO}; "
            f"measured: {'; '.join(verdicts)}. "
            "`jax.grad` is the step the library took before the one-pass step (`posattn.theory.fused`).",
            "",
            "Where the XLA tile loop spends its time above the floor (ms per step, minima as above): the "
            "probes walk its tiles (`posattn.theory.fused.tiled`) without the loss, first multiplying each "
            "tile by v, then adding the second product from cache; the differences are the tile copy and "
            'loop, the second read, and the loss with its gradient per tile. "One tile, both products" runs '
            "both products on every device's first tile alone, as often as the loop has tiles: their arithmetic "
            'with X in cache, no memory read. "Tiles, both products" is the floor of this tile loop before '
            "its loss, the last column its ratio to the GEMV.",
            "",
            "| problem | GEMV | tiles, X_j v | tiles, both products | XLA tile loop | copy and loop | "
            "second read | loss per tile | one tile, both products | tiles, both products / GEMV |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *split_rows,
        ]
    )


def main(argv):
    del argv
    compile_options.use_cpu_cores()  # as the binaries do: one CPU device per core, the sample axis split over them
    paper_cfg, paper_gd = get_preset("paper")
    small = TheoryConfig(D=10, C=2, d=100, q=0.4, partition="random")
    cases = {  # --cases key -> (row name, problem)
        "n50k": ("N=50,000, D=10, d=100", small, dataclasses.replace(paper_gd, N=50_000)),
        "n1m": ("N=1,000,000, D=10, d=100", small, dataclasses.replace(paper_gd, N=1_000_000)),
        "paper": ("paper preset (N=20,000, D=36, d=64)", paper_cfg, paper_gd),
    }
    unknown = set(FLAGS.cases) - set(cases)
    if unknown:
        raise app.UsageError(f"--cases: unknown {sorted(unknown)} (known: {', '.join(cases)})")
    cases = {cases[key][0]: cases[key][1:] for key in FLAGS.cases}
    rows, split_rows, verdicts = [], [], []
    for name, (cfg, gd) in cases.items():
        r = measure(cfg, gd)
        ms, med = r["ms"], r["median"]
        fmt = lambda n: f"{ms[n]:.1f} ({med[n]:.1f})" if n in ms else "not installed"
        torch_ratio = f"{ms['PyTorch'] / ms['ours']:.2f}x" if "PyTorch" in ms else "n/a"
        floor_ratio = ms["ours"] / ms["GEMV"]
        loop = "ours, XLA tile loop"
        print(
            f"{name}: ours {fmt('ours')} ms/step, XLA tile loop {fmt(loop)}, jax.grad {fmt('jax.grad')}, "
            f"PyTorch {fmt('PyTorch')}, "
            f"one GEMV over X {fmt('GEMV')} (min (median) over {FLAGS.rounds} rounds); PyTorch / ours "
            f"{torch_ratio}, ours / GEMV {floor_ratio:.2f}x; compile {r['compile_s']:.2f} s; probes: "
            + ", ".join(f"{p} {fmt(p)}" for p in PROBES),
            flush=True,
        )
        rows.append(
            f"| {name} | {fmt('ours')} | {fmt(loop)} | {fmt('jax.grad')} | {fmt('PyTorch')} | "
            f"{fmt('GEMV')} | {torch_ratio} | {floor_ratio:.2f}x | {ms[loop] / ms['GEMV']:.2f}x | "
            f"{ms['jax.grad'] / ms['ours']:.2f}x | "
            f"{r['compile_s']:.2f} |"
        )
        steps = [ms["GEMV"], ms["tiles, X_j v"], ms["tiles, both products"], ms[loop]]
        split_rows.append(
            f"| {name} | {' | '.join(f'{t:.1f}' for t in steps)} | "
            f"{' | '.join(f'{b - a:+.1f}' for a, b in zip(steps, steps[1:]))} | "
            f"{ms['one tile, both products']:.1f} | "
            f"{ms['tiles, both products'] / ms['GEMV']:.2f}x |"
        )
        verdicts.append(
            f"{name}: ours / GEMV {floor_ratio:.2f}x, "
            f"{'met' if floor_ratio <= GOAL_FLOOR_RATIO else 'missed'}"
            + (
                f"; PyTorch / ours {torch_ratio}, "
                f"{'met' if ms['PyTorch'] / ms['ours'] >= GOAL_TORCH_RATIO else 'missed'}"
                if "PyTorch" in ms
                else ""
            )
        )
        # after every problem: a run stopped by a time limit keeps what it measured
        update_section(
            "Theory: GD steps per second (benchmarks/theory_step.py)",
            section_body(rows, split_rows, verdicts),
        )


if __name__ == "__main__":
    app.run(main)
