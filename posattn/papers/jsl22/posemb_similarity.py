"""Positional-embedding similarity maps of a trained ViT, JSL22 Figures 1a and 5c
(`experiments/posemb_similarity.py`): its config, and the driver that reads the run, measures the maps'
locality (`posattn.analysis.posemb`, `attention_distance`) and draws them.
"""

import functools
import os

import jax
import ml_collections
import numpy as np

from posattn import configs, ownership
from posattn.errors import ConfigError


def _schema(fields) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            # the trained ViT run whose maps are drawn (a train_images workdir: config.json + checkpoints/)
            "run": ml_collections.config_dict.placeholder(str),
            "threshold": 0.55,  # level drawn as a contour on the maps (Figure 1a's threshold)
            "patches": "",  # patches to draw (row-major indices); "": all on grids up to 4x4, else 8 spread out
            # with one P per block (pos_shared=False): whose P, from 0; a run with one shared P takes only 0
            "block": 0,
            # images of the run's evaluation split (its validation examples where it holds some out) over which
            # the attention maps' mean distance is averaged; 0: not measured (it needs the run's dataset)
            "images": 1000,
        }
    )


# `:quick` changes nothing: the maps of one trained run take seconds (its smoke run is the run it reads)
SCHEMA = configs.Schema(
    "a posemb_similarity config (run, threshold, patches, block, images)",
    _schema,
    lambda c: None,
    "posemb_similarity",
)


def chosen_patches(text: str, grid_hw) -> list[int]:
    h, w = grid_hw
    if text.strip():
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not all(t.isdigit() and int(t) < h * w for t in items):
            raise ConfigError(f"patches={text!r}: give row-major patch indices below {h * w}")
        return [int(t) for t in items]
    if h * w <= 16:
        return list(range(h * w))
    rows, cols = [0, h // 3, 2 * h // 3, h - 1], [0, w // 2]
    return [r * w + c for c in cols for r in rows]


def run(opts, workdir: str, claim) -> None:
    """Check `opts` (SCHEMA; `config` is the trained run's, below) and its run, `claim(workdir,
    "posemb_similarity", ...)` (the binary's `cli.claim`), then draw the maps of `opts.run` and write
    posemb_similarity.png and posemb_similarity.json into `workdir`."""
    if opts.run is None:
        raise ConfigError("config.run is required: a trained ViT run (a train_images workdir)")
    trained = ownership.check_path(opts.run, "config.run")
    ownership.check_run(trained, "train_images")
    claim(  # a workdir of its own
        workdir,
        "posemb_similarity",
        {
            "run": os.path.abspath(trained),
            "block": opts.block,
            "threshold": opts.threshold,
            "patches": opts.patches,
        },
    )
    import optax

    from posattn import io
    from posattn.analysis import attention_distance, posemb
    from posattn.plots import save_png
    from posattn.plots import vision as plots
    from posattn.vision import runs, setup
    from posattn.vision.data.permutation import block_permutation
    from posattn.vision.models import attention_maps
    from posattn.vision.state import init_state

    model, variables, config, preprocess = runs.load_run(trained)
    run_setup = setup.resolve(config)  # its augmentation as applied, its splits
    if config.model.name != "vit":
        raise ConfigError(
            f"the run trained {config.model.name!r}: positional embeddings need a ViT run"
        )
    params = variables["params"]
    if opts.block and np.ndim(params["pos_embedding"]) == 2:
        raise ConfigError(
            f"block={opts.block}: the run has one positional embedding P shared by all "
            "blocks (model.pos_shared or vanilla attention); block picks a block's P only "
            "in a run with model.pos_shared=False"
        )
    shape = preprocess.info.image_shape
    side, patch = shape[0], model.patch_size
    grid = (side // patch, side // patch)
    initial = init_state(model, shape, config.seed, optax.identity())[
        "params"
    ]  # the run's own initial P
    P = posemb.patch_embedding(params, grid, cls=config.model.pool == "cls", block=opts.block)
    panels = {
        "at initialisation": posemb.patch_embedding(
            initial, grid, cls=config.model.pool == "cls", block=opts.block
        ),
        "as trained": P,
    }
    stats = {}
    g = config.permute_block
    permuted = bool(g) and g < side
    if permuted:
        perm = block_permutation((side, side), g, config.permute_seed)
        panels["un-permuted"] = posemb.unpermute_embedding(P, g, patch, perm)
    maps = {}
    flipped = run_setup.augment.flip  # mirror images in training: P may be mirror-symmetric
    for name, emb in panels.items():
        maps[name] = posemb.similarity_maps(emb)  # whole range; the threshold is drawn as a contour
        sim = posemb.cosine_similarity(emb.reshape(grid[0] * grid[1], -1))
        stats[name] = {
            "rank_correlation": posemb.distance_rank_correlation(sim, grid),
            **(
                {
                    "rank_correlation_flip_folded": posemb.distance_rank_correlation(
                        sim, grid, fold_flip=True
                    )
                }
                if flipped
                else {}
            ),
            **posemb.neighbour_statistic(sim, grid),
        }
        if (
            permuted and name != "at initialisation" and g > patch
        ):  # (g = patch: every pair is across blocks)
            # un-permuted: the neighbours no training image showed side by side; as trained, the same
            # count of pairs adjacent only in the permuted layout (the control)
            stats[f"{name}, across blocks"] = posemb.neighbour_statistic(
                sim, grid, across_blocks=g // patch
            )
    distance = {}
    if (
        opts.images
    ):  # the attention's own locality (Fig. 1a shows P's), on the run's held-out images
        split = run_setup.eval_splits[0]
        n = min(opts.images, run_setup.split(split).num_examples)
        x = preprocess(run_setup.split(split).read(np.arange(n))[0])
        apply = jax.jit(functools.partial(attention_maps, model))
        per_block = {}
        for start in range(0, n, 250):
            chunk = apply(variables, x[start : start + 250])
            for block, A in chunk.items():
                d = attention_distance.mean_attention_distance(
                    A, grid, cls=config.model.pool == "cls"
                )
                per_block.setdefault(block, []).append((len(A), d))
        distance = {
            "images": n,
            "split": split,
            "uniform": attention_distance.uniform_distance(grid),
            "per_head": {b: (sum(k * d for k, d in v) / n).tolist() for b, v in per_block.items()},
        }
        distance["mean"] = float(np.mean([np.mean(d) for d in distance["per_head"].values()]))
    save_png(
        plots.similarity_maps_figure(
            maps, chosen_patches(opts.patches, grid), grid, opts.threshold
        ),
        os.path.join(workdir, "posemb_similarity.png"),
    )
    result = {
        "run": os.path.abspath(trained),
        "grid": list(grid),
        "patch_size": patch,
        "permute_block": g,
        "attention": config.model.attention,
        "threshold": opts.threshold,
        "flip": flipped,
        "statistic": stats,
        "attention_distance": distance,
    }
    io.write_json(os.path.join(workdir, "posemb_similarity.json"), result)
    for name, s in stats.items():
        rho = (
            f"rank correlation with distance {s['rank_correlation']:+.3f}; "
            if "rank_correlation" in s
            else ""
        )
        if "rank_correlation_flip_folded" in s:
            rho += f"flip-folded {s['rank_correlation_flip_folded']:+.3f}; "
        print(
            f"{name}: {rho}neighbours {s['neighbour']:.3f} vs non-neighbours {s['non_neighbour']:.3f} "
            f"(gap {s['gap']:+.3f}, z {s['z']:.1f}, shuffle p {s['p_value']:.4f})"
        )
    if distance:
        print(
            f"mean attention distance over {distance['images']} {distance['split']} images: "
            f"{distance['mean']:.2f} patches (uniform attention {distance['uniform']:.2f}); per block "
            + ", ".join(f"{b} {np.mean(d):.2f}" for b, d in distance["per_head"].items())
        )
