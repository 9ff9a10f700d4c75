"""Loss landscape on filter-normalised directions (PK22 Figure 1)."""
import jax
import jax.numpy as jnp
import numpy as np

from posattn.analysis import landscape


def _params():
    k = jax.random.split(jax.random.key(0), 5)
    return {"dense": {"kernel": jax.random.normal(k[0], (3, 4)) * jnp.arange(1, 5), "bias": jnp.ones(4)},
            "conv": {"kernel": jax.random.normal(k[1], (3, 3, 2, 5))},
            "pos_embedding": jax.random.normal(k[2], (6, 4)),
            # the attention's layouts: (in, 3, heads, head_dim) with a (3, heads, head_dim) bias, and
            # (heads, head_dim, out)
            "attn": {"qkv": {"kernel": jax.random.normal(k[3], (4, 3, 2, 2)), "bias": jnp.ones((3, 2, 2))},
                     "out": {"kernel": jax.random.normal(k[4], (2, 2, 4)), "bias": jnp.ones(4)}},
            "cls": jnp.arange(1.0, 5.0).reshape(1, 1, 4)}


def _unit_norms(kernel, output_axes):
    """The norm of each output unit (an index of `output_axes`) of a kernel."""
    inputs = [a for a in range(kernel.ndim) if a not in output_axes]
    moved = jnp.moveaxis(kernel, inputs, list(range(len(inputs))))
    return jnp.linalg.norm(moved.reshape(-1, *moved.shape[len(inputs):]), axis=0).ravel()


def test_directions_are_filter_normalised():
    params = _params()
    d = landscape.filter_normalised_direction(jax.random.key(1), params)
    # each output unit (PyTorch's out-channel) of each kernel moves by its own norm
    for kern, dk, outputs in ((params["dense"]["kernel"], d["dense"]["kernel"], (1,)),
                              (params["conv"]["kernel"], d["conv"]["kernel"], (3,)),
                              (params["attn"]["qkv"]["kernel"], d["attn"]["qkv"]["kernel"], (1, 2, 3)),
                              (params["attn"]["out"]["kernel"], d["attn"]["out"]["kernel"], (2,))):
        assert _unit_norms(dk, outputs).shape[0] == np.prod([kern.shape[a] for a in outputs])
        np.testing.assert_allclose(_unit_norms(dk, outputs), _unit_norms(kern, outputs), rtol=1e-5)
        assert not np.allclose(dk / jnp.linalg.norm(dk), kern / jnp.linalg.norm(kern))  # random, not theta
    np.testing.assert_allclose(jnp.linalg.norm(d["cls"]), jnp.linalg.norm(params["cls"]), rtol=1e-5)  # one filter
    assert not np.allclose(jnp.abs(d["cls"]), params["cls"])  # not one filter per element
    for zeroed in (d["dense"]["bias"], d["attn"]["qkv"]["bias"], d["attn"]["out"]["bias"], d["pos_embedding"]):
        assert not zeroed.any()


def test_surface_at_origin_is_the_loss_and_matches_a_quadratic():
    params = _params()
    batch = {"x": jax.random.normal(jax.random.key(5), (8, 3))}

    def loss(p, b):
        return jnp.mean((b["x"] @ p["dense"]["kernel"] + p["dense"]["bias"]) ** 2) + jnp.sum(
            p["conv"]["kernel"] ** 2)

    d1 = landscape.filter_normalised_direction(jax.random.key(1), params)
    d2 = landscape.filter_normalised_direction(jax.random.key(2), params)
    L = jax.jit(lambda p, b, u, v: landscape.surface(loss, p, b, u, v, chunk=8))(params, batch, d1, d2)
    assert L.shape == (21, 21)
    np.testing.assert_allclose(L[10, 10], loss(params, batch), rtol=1e-6)
    xs = landscape.grid()
    for iy, ix in ((0, 0), (3, 17), (20, 5)):
        moved = jax.tree.map(lambda t, a, b: t + xs[ix] * a + xs[iy] * b, params, d1, d2)
        np.testing.assert_allclose(L[iy, ix], loss(moved, batch), rtol=1e-5)


def test_surface_compiles_once_for_many_batches():
    traces = []

    def loss(p, b):
        return jnp.sum((b @ p["dense"]["kernel"]) ** 2)

    def tool(p, b):
        traces.append(1)  # runs only while jax traces (compiles) the function
        return landscape.surface(loss, p, b, d, d, xs=landscape.grid(5), ys=landscape.grid(5), chunk=4)

    params = _params()
    d = landscape.filter_normalised_direction(jax.random.key(1), params)
    run = jax.jit(tool)
    for seed in range(3):
        run(params, jax.random.normal(jax.random.key(seed), (4, 3)))
    assert len(traces) == 1


def test_frobenius_penalty_is_not_squared():
    np.testing.assert_allclose(landscape.frobenius_penalty({"a": jnp.full((2, 2), 3.0), "b": jnp.ones(4)}, 0.1),
                               0.1 * (6.0 + 2.0))
