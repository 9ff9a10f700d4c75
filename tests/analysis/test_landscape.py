"""Loss landscape on normalised random directions (PK22 Figure 1)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posattn.analysis import landscape
from posattn.errors import ConfigError


def _params():
    k = jax.random.split(jax.random.key(0), 5)
    return {
        "dense": {
            "kernel": jax.random.normal(k[0], (3, 4)) * jnp.arange(1, 5),
            "bias": jnp.ones(4),
        },
        "conv": {"kernel": jax.random.normal(k[1], (3, 3, 2, 5))},
        "pos_embedding": jax.random.normal(k[2], (6, 4)),
        # the attention's layouts: (in, 3, heads, head_dim) with a (3, heads, head_dim) bias, and
        # (heads, head_dim, out)
        "attn": {
            "qkv": {"kernel": jax.random.normal(k[3], (4, 3, 2, 2)), "bias": jnp.ones((3, 2, 2))},
            "out": {"kernel": jax.random.normal(k[4], (2, 2, 4)), "bias": jnp.ones(4)},
        },
        "cls": jnp.arange(1.0, 5.0).reshape(1, 1, 4),
    }


def _unit_norms(kernel, output_axes):
    """The norm of each output unit (an index of `output_axes`) of a kernel."""
    inputs = [a for a in range(kernel.ndim) if a not in output_axes]
    moved = jnp.moveaxis(kernel, inputs, list(range(len(inputs))))
    return jnp.linalg.norm(moved.reshape(-1, *moved.shape[len(inputs) :]), axis=0).ravel()


# each kernel of _params() in PyTorch's layout (out, in, ...), and back
_TO_TORCH = {
    ("dense", "kernel"): (lambda k: k.T, lambda t, shape: t.T),
    ("conv", "kernel"): (
        lambda k: k.transpose(3, 2, 0, 1),
        lambda t, shape: t.transpose(2, 3, 1, 0),
    ),
    ("attn", "qkv", "kernel"): (
        lambda k: k.reshape(k.shape[0], -1).T,
        lambda t, shape: t.T.reshape(shape),
    ),
    ("attn", "out", "kernel"): (
        lambda k: k.reshape(-1, k.shape[-1]).T,
        lambda t, shape: t.T.reshape(shape),
    ),
    ("cls",): (lambda k: k, lambda t, shape: t),  # timm's cls_token is (1, 1, width) too
}


def _pk22_normalize_filter(b, w):
    """PK22's ops/loss_landscapes.py normalize_filter on one PyTorch tensor, in numpy:
    torch.norm(w, dim=0, keepdim=True) / (torch.norm(b, dim=0, keepdim=True) + 1e-7) * b."""
    return (
        np.linalg.norm(w, axis=0, keepdims=True)
        / (np.linalg.norm(b, axis=0, keepdims=True) + 1e-7)
        * b
    )


def _get(tree, path):
    for k in path:
        tree = tree[k]
    return np.asarray(tree, np.float64)


def test_default_normalisation_is_pk22s_normalize_filter():
    params = _params()
    raw = jax.tree.map(
        lambda t: np.random.default_rng(t.size).normal(size=t.shape).astype(np.float32), params
    )
    d = landscape.normalise_direction(raw, params)
    for path, (to_torch, back) in _TO_TORCH.items():
        w, b = _get(params, path), _get(raw, path)
        expected = back(_pk22_normalize_filter(to_torch(b), to_torch(w)), w.shape)
        np.testing.assert_allclose(_get(d, path), expected, rtol=1e-5, err_msg=str(path))
    # PyTorch's 1-D tensors (biases) and the positional embedding do not move (ignore_bn, ignore_kw)
    for zeroed in (
        d["dense"]["bias"],
        d["attn"]["qkv"]["bias"],
        d["attn"]["out"]["bias"],
        d["pos_embedding"],
    ):
        assert not np.asarray(zeroed).any()


def test_random_direction_keeps_pk22s_slice_norms_by_default():
    """Each (in, kh, kw) slice of a kernel, taken over the output axis, has theta*'s norm in the default
    direction; Li et al.'s per-output-unit norms only with normalisation="filter"."""
    params = _params()
    d = landscape.random_direction(jax.random.key(1), params)
    for path, (to_torch, _) in _TO_TORCH.items():
        slices = lambda tree: np.linalg.norm(to_torch(_get(tree, path)), axis=0)  # noqa: E731
        np.testing.assert_allclose(slices(d), slices(params), rtol=1e-5, err_msg=str(path))
    conv = _get(params, ("conv", "kernel"))
    assert not np.allclose(
        _unit_norms(d["conv"]["kernel"], (3,)), _unit_norms(conv, (3,)), rtol=0.05
    )


def test_filter_normalisation_is_li_et_als_per_output_unit():
    params = _params()
    d = landscape.random_direction(jax.random.key(1), params, normalisation="filter")
    # each output unit (PyTorch's out-channel) of each kernel moves by its own norm
    for kern, dk, outputs in (
        (params["dense"]["kernel"], d["dense"]["kernel"], (1,)),
        (params["conv"]["kernel"], d["conv"]["kernel"], (3,)),
        (params["attn"]["qkv"]["kernel"], d["attn"]["qkv"]["kernel"], (1, 2, 3)),
        (params["attn"]["out"]["kernel"], d["attn"]["out"]["kernel"], (2,)),
    ):
        assert _unit_norms(dk, outputs).shape[0] == np.prod([kern.shape[a] for a in outputs])
        np.testing.assert_allclose(_unit_norms(dk, outputs), _unit_norms(kern, outputs), rtol=1e-5)
        assert not np.allclose(
            dk / jnp.linalg.norm(dk), kern / jnp.linalg.norm(kern)
        )  # random, not theta
    # the class token is one filter
    np.testing.assert_allclose(jnp.linalg.norm(d["cls"]), jnp.linalg.norm(params["cls"]), rtol=1e-5)
    assert not np.allclose(jnp.abs(d["cls"]), params["cls"])  # not one filter per element
    for zeroed in (
        d["dense"]["bias"],
        d["attn"]["qkv"]["bias"],
        d["attn"]["out"]["bias"],
        d["pos_embedding"],
    ):
        assert not zeroed.any()


def test_surface_at_origin_is_the_loss_and_matches_a_quadratic():
    params = _params()
    batch = {"x": jax.random.normal(jax.random.key(5), (8, 3))}

    def loss(p, b):
        return jnp.mean((b["x"] @ p["dense"]["kernel"] + p["dense"]["bias"]) ** 2) + jnp.sum(
            p["conv"]["kernel"] ** 2
        )

    d1 = landscape.random_direction(jax.random.key(1), params)
    d2 = landscape.random_direction(jax.random.key(2), params)
    L = jax.jit(lambda p, b, u, v: landscape.surface(loss, p, b, u, v, chunk=8))(
        params, batch, d1, d2
    )
    assert L.shape == (21, 21)
    np.testing.assert_allclose(L[10, 10], loss(params, batch), rtol=1e-6)
    xs = landscape.grid()
    for iy, ix in ((0, 0), (3, 17), (20, 5)):
        moved = jax.tree.map(lambda t, a, b: t + xs[ix] * a + xs[iy] * b, params, d1, d2)
        np.testing.assert_allclose(L[iy, ix], loss(moved, batch), rtol=1e-5)
    # a coarser grid of 4k + 1 points (the PK22 suite's 9) holds the points the claims read, with the same values
    coarse = jax.jit(
        lambda p, b, u, v: landscape.surface(
            loss, p, b, u, v, xs=landscape.grid(9), ys=landscape.grid(9)
        )
    )(params, batch, d1, d2)
    # x, y in {-1, -0.5, 0, 0.5, 1}: every second point of 9, every fifth of 21
    np.testing.assert_allclose(coarse[::2, ::2], L[::5, ::5], rtol=1e-5)
    # the chunk is a matter of speed only: one point at a time (the CPU's default) gives the same surface
    assert landscape.default_chunk() == 1  # the tests run on a CPU
    one = jax.jit(lambda p, b, u, v: landscape.surface(loss, p, b, u, v))(params, batch, d1, d2)
    np.testing.assert_allclose(one, L, rtol=1e-5)


def test_surface_compiles_once_for_many_batches():
    traces = []

    def loss(p, b):
        return jnp.sum((b @ p["dense"]["kernel"]) ** 2)

    def tool(p, b):
        traces.append(1)  # runs only while jax traces (compiles) the function
        return landscape.surface(
            loss, p, b, d, d, xs=landscape.grid(5), ys=landscape.grid(5), chunk=4
        )

    params = _params()
    d = landscape.random_direction(jax.random.key(1), params)
    run = jax.jit(tool)
    for seed in range(3):
        run(params, jax.random.normal(jax.random.key(seed), (4, 3)))
    assert len(traces) == 1


def test_directions_of_other_params_grids_and_chunks_are_refused():
    params = _params()
    d = landscape.random_direction(jax.random.key(1), params)
    loss = lambda p, b: sum(jnp.sum(x) for x in jax.tree.leaves(p))  # noqa: E731
    # a direction whose cls entry is (4,): today broadcast against (1, 1, 4) and returned as (1, 1, 4)
    with pytest.raises(ConfigError, match=r"d1 at 'cls' has shape \(4,\), the params \(1, 1, 4\)"):
        landscape.surface(loss, params, None, {**d, "cls": d["cls"].ravel()}, d, xs=[0.0], ys=[0.0])
    with pytest.raises(ConfigError, match="the direction has another tree structure"):
        landscape.normalise_direction({k: v for k, v in d.items() if k != "cls"}, params)
    with pytest.raises(ConfigError, match="give n >= 2 points"):
        landscape.grid(1)
    with pytest.raises(ConfigError, match="chunk=0: give a positive number"):
        landscape.surface(loss, params, None, d, d, xs=[0.0], ys=[0.0], chunk=0)
