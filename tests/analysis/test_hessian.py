"""Hessian-vector products and power iteration against dense linear algebra (PK22 Figure 2 tools)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from posattn.analysis import eigensolvers, hessian, objective
from posattn.errors import ConfigError


def _tiny_loss(params, batch):
    """Cross-entropy of a one-hidden-layer tanh network plus L2: a non-convex loss with mixed curvature."""
    h = jnp.tanh(batch["x"] @ params["w1"] + params["b1"])
    logits = h @ params["w2"]
    nll = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), batch["y"][:, None], 1))
    return nll + objective.l2_penalty(params, 1e-3, "squared")


def _tiny(seed=0, n=16):
    k = jax.random.split(jax.random.key(seed), 5)
    params = {
        "w1": jax.random.normal(k[0], (4, 3)),
        "b1": jax.random.normal(k[1], (3,)),
        "w2": 2.0 * jax.random.normal(k[2], (3, 3)),
    }
    batch = {"x": jax.random.normal(k[3], (n, 4)), "y": jax.random.randint(k[4], (n,), 0, 3)}
    return params, batch


def _dense_hessian(params, batch):
    flat, unravel = ravel_pytree(params)
    return jax.jit(jax.hessian(lambda f: _tiny_loss(unravel(f), batch)))(flat)


def test_hvp_equals_dense_hessian_times_vector():
    params, batch = _tiny()
    flat, unravel = ravel_pytree(params)
    H = _dense_hessian(params, batch)
    v = jax.random.normal(jax.random.key(7), flat.shape)
    got = ravel_pytree(
        jax.jit(lambda p, b, u: hessian.hvp(_tiny_loss, p, b, u))(params, batch, unravel(v))
    )[0]
    np.testing.assert_allclose(got, H @ v, rtol=1e-4, atol=1e-5)


def test_power_iteration_finds_largest_magnitude_eigenvalues_of_known_spectrum():
    # the largest-magnitude eigenvalues include negative ones: an algebraic-max solver would miss -8, -4
    spectrum = np.array([10.0, -8.0, 6.0, -4.0, 2.5, 1.0, -0.5, 0.2, 0.1, 0.0])
    Q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(10, 10)))
    M = jnp.asarray(Q @ np.diag(spectrum) @ Q.T, jnp.float32)
    pairs = eigensolvers.power_iteration(
        lambda v: M @ v, jnp.ones(10), k=5, max_iterations=1000, tolerance=1e-7
    )
    lams, U, iters = pairs.values, pairs.vectors, pairs.iterations
    np.testing.assert_allclose(lams, [10.0, -8.0, 6.0, -4.0, 2.5], rtol=1e-3, atol=1e-3)
    # the vectors are eigenvectors of M
    np.testing.assert_allclose(U @ M, lams[:, None] * U, atol=1e-2)
    assert (np.asarray(iters) > 1).all()


def test_top_eigenvalues_match_dense_hessian():
    params, batch = _tiny()
    H = np.asarray(_dense_hessian(params, batch), np.float64)
    eig = np.linalg.eigvalsh(H)
    expected = eig[np.argsort(-np.abs(eig))][:5]
    # the tiny model has negative curvature among its top-5 by magnitude, so the test sees the sign
    assert (expected < 0).any()
    lams = jax.jit(
        lambda p, b, k: hessian.top_eigenvalues(
            _tiny_loss, p, b, k, max_iterations=2000, tolerance=1e-7
        )
    )(params, batch, jax.random.key(1)).values
    np.testing.assert_allclose(np.sort(lams), np.sort(expected), rtol=2e-2, atol=2e-3)


def test_spectrum_maps_minibatches_and_compiles_once():
    traces = []

    def tool(p, b, k):
        traces.append(1)  # runs only while jax traces (compiles) the function
        return hessian.spectrum(_tiny_loss, p, b, k, k=3, max_iterations=30)

    params, _ = _tiny()
    run = jax.jit(tool)
    for seed in (1, 2):
        batches = jax.tree.map(
            lambda *xs: jnp.stack(xs), *[_tiny(seed * 10 + i)[1] for i in range(4)]
        )
        pairs = run(params, batches, jax.random.key(seed))
        assert (
            pairs.values.shape == (4, 3)
            and pairs.iterations.shape == (4, 3)
            and pairs.vectors is None
        )
    assert len(traces) == 1  # the second set of batches reused the compiled program
    batches = jax.tree.map(lambda *xs: jnp.stack(xs), *[_tiny(90 + i)[1] for i in range(4)])
    # each mini-batch gets its own spectrum: the first matches top_eigenvalues on that batch alone
    one = jax.jit(
        lambda p, b, k: hessian.top_eigenvalues(_tiny_loss, p, b, k, k=3, max_iterations=30)
    )(params, jax.tree.map(lambda x: x[0], batches), jax.random.split(jax.random.key(3), 4)[0])
    np.testing.assert_allclose(
        run(params, batches, jax.random.key(3)).values[0], one.values, rtol=1e-4
    )


def test_spectrum_on_host_equals_the_one_program_spectrum():
    # the host loop (what the PK22 suite runs) and the in-program loops run the same steps from the same
    # start vectors: the same eigenvalues and iteration counts, for every mini-batch
    params, _ = _tiny()
    batches = jax.tree.map(lambda *xs: jnp.stack(xs), *[_tiny(50 + i)[1] for i in range(3)])
    key = jax.random.key(4)
    pairs = jax.jit(lambda p, b, k: hessian.spectrum(_tiny_loss, p, b, k, k=4, max_iterations=60))(
        params, batches, key
    )
    step = jax.jit(hessian.spectrum_step(_tiny_loss, max_iterations=60), donate_argnums=2)
    calls = []

    def counted(batch, state):
        calls.append(1)
        return step(params, batch, state)

    host = hessian.spectrum_on_host(counted, params, batches, key, k=4)
    np.testing.assert_array_equal(host.iterations, pairs.iterations)
    np.testing.assert_array_equal(host.converged, pairs.converged)
    np.testing.assert_allclose(host.values, pairs.values, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(host.residuals, pairs.residuals, rtol=1e-3, atol=1e-6)
    assert len(calls) == int(np.sum(pairs.iterations))  # one call per Hessian-vector product


def test_host_loop_is_chosen_for_overlapping_convolutions_only():
    import flax.linen as nn

    x = jnp.ones((2, 8, 8, 1))

    def loss_of(module):
        params = module.init(jax.random.key(0), x)

        def loss(p, b):
            return jnp.mean(module.apply(p, b) ** 2)

        return hessian.host_loop_is_faster(loss, params, x)

    assert loss_of(nn.Conv(4, (3, 3)))  # a ResNet's 3 x 3, stride 1
    assert not loss_of(nn.Conv(4, (2, 2), strides=(2, 2)))  # a ViT's patch embedding
    assert not loss_of(nn.Dense(4))

    # found inside nested programs too (a scan inside a jitted function)
    def scanned(w, b):
        def block(c, _):
            return jax.lax.conv_general_dilated(
                c, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
            ), None

        return jnp.mean(jax.jit(lambda c: jax.lax.scan(block, c, None, length=2)[0])(b) ** 2)

    assert hessian.host_loop_is_faster(scanned, jnp.ones((3, 3, 1, 1)), x)


def test_power_step_after_the_last_run_changes_nothing_stored():
    M = jnp.diag(jnp.arange(1.0, 7.0))
    state = eigensolvers.power_init(jnp.ones(6), k=2)
    step = jax.jit(
        lambda s: eigensolvers.power_step(lambda v: M @ v, s, max_iterations=200, tolerance=1e-6)
    )
    while int(state["i"]) < 2:
        state = step(state)
    done = eigensolvers.power_step(lambda v: M @ v, state)
    for name in ("U", "lams", "iters", "i"):
        np.testing.assert_array_equal(done[name], state[name])
    np.testing.assert_allclose(state["lams"], [6.0, 5.0], rtol=1e-3)


def test_summaries():
    s = hessian.summaries(np.array([[3.0, -1.0, 5.0], [-2.0, 4.0, 0.0]]))
    assert s["nep"] == 2 / 6
    assert s["ape"] == 4.0
    assert (s["max"], s["min"], s["count"]) == (5.0, -2.0, 6)
    assert np.isnan(hessian.summaries(np.array([[-1.0], [-2.0]]))["ape"])


def _known_operator(spectrum, seed=0):
    Q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(len(spectrum), len(spectrum))))
    return jnp.asarray(Q @ np.diag(spectrum) @ Q.T, jnp.float32)


def test_power_iteration_stopped_by_its_cap_is_flagged_not_converged_with_its_residual():
    # close eigenvalues (10 vs 9.5) need many iterations: a cap of 3 stops every run short of the tolerance
    M = _known_operator([10.0, 9.5, -9.0, 8.5, 8.0, 1.0, 0.5, 0.2])
    pairs = jax.jit(
        lambda v: eigensolvers.power_iteration(lambda u: M @ u, v, k=5, max_iterations=3)
    )(jnp.ones(8))
    assert not np.asarray(pairs.converged).any()
    np.testing.assert_array_equal(pairs.iterations, 3)
    assert (
        np.asarray(pairs.residuals) > 1e-2
    ).all()  # ||A v - lambda v|| / |lambda|: far from an eigenpair
    # descending magnitude whatever order the runs stopped in
    assert (np.diff(np.abs(np.asarray(pairs.values))) <= 0).all()
    s = hessian.summaries(
        jax.tree.map(lambda a: np.stack([a, a]), dataclasses.replace(pairs, vectors=None))
    )
    assert s["not_converged"] == 10


def test_power_iteration_with_enough_iterations_converges_to_eigvalsh():
    spectrum = np.array([10.0, -8.0, 6.0, -4.0, 2.5, 1.0, -0.5, 0.2, 0.1, 0.0])
    M = _known_operator(spectrum)
    pairs = eigensolvers.power_iteration(
        lambda u: M @ u, jnp.ones(10), k=5, max_iterations=1000, tolerance=1e-7
    )
    assert np.asarray(pairs.converged).all()
    assert (np.asarray(pairs.iterations) < 1000).all()
    assert (np.asarray(pairs.residuals) < 1e-2).all()
    eig = np.linalg.eigvalsh(np.asarray(M, np.float64))
    np.testing.assert_allclose(
        pairs.values, eig[np.argsort(-np.abs(eig))][:5], rtol=1e-3, atol=1e-3
    )
    s = hessian.summaries(
        jax.tree.map(lambda a: np.stack([a, a]), dataclasses.replace(pairs, vectors=None))
    )
    assert s["not_converged"] == 0
    assert (
        hessian.summaries(np.stack([pairs.values] * 2))["not_converged"] is None
    )  # values alone: unknown


def test_summaries_refuse_one_minibatch_and_non_finite_eigenvalues():
    with pytest.raises(ConfigError, match=r"M >= 2 mini-batches"):
        hessian.summaries(np.array([[3.0, -1.0, 5.0]]))
    with pytest.raises(ConfigError, match="NaN or inf"):
        hessian.summaries(np.array([[3.0, np.nan], [1.0, 2.0]]))


def test_a_run_stalled_between_plus_and_minus_eigenvalues_is_flagged_by_its_residual():
    # eigenvalues +10 and -10: the iterate swings between two vectors whose Rayleigh quotient is the same,
    # once the small eigenvalues' parts have decayed, so PK22's rule (lambda changes by < tolerance) stops
    # the run early, on no eigenvalue at all
    M = _known_operator([10.0, -10.0, 1.0, 0.5])
    v0 = jnp.asarray([1.0, 2.0, 3.0, 4.0])
    pairs = eigensolvers.power_iteration(lambda u: M @ u, v0, k=1, max_iterations=100)
    assert int(pairs.iterations[0]) < 10 and abs(float(pairs.values[0])) < 9.0
    assert float(pairs.residuals[0]) > eigensolvers.RESIDUAL_TOLERANCE and not bool(
        pairs.converged[0]
    )


def test_more_eigenvalues_than_parameters_and_a_cap_below_two_are_refused():
    M = jnp.diag(jnp.arange(1.0, 4.0))
    # k = 5 of a 3 x 3 operator: today two eigenvalues of 0 that the operator does not have
    with pytest.raises(ConfigError, match=r"k=5 eigenvalues from a start vector of shape \(3,\)"):
        eigensolvers.power_iteration(lambda v: M @ v, jnp.ones(3), k=5)
    with pytest.raises(ConfigError, match="max_iterations=1"):
        eigensolvers.power_iteration(lambda v: M @ v, jnp.ones(3), k=2, max_iterations=1)


def _top_by_magnitude(M, k):
    eig = np.linalg.eigvalsh(np.asarray(M, np.float64))
    return eig[np.argsort(-np.abs(eig))][:k]


def test_lanczos_converges_where_power_iteration_stalls_between_plus_and_minus_eigenvalues():
    # +10 and -10: power iteration's first run stalls in their span (flagged), and the runs deflated by
    # its vector find values of no eigenvector of M; Lanczos finds eigvalsh's top 3 by magnitude
    M = _known_operator([10.0, -10.0, 3.0, 1.0, 0.5, 0.2, 0.1, 0.05])
    v0 = jnp.arange(1.0, 9.0)
    power = eigensolvers.power_iteration(lambda u: M @ u, v0, k=3)
    # its stalled run's vector deflated the later runs' operator: those are flagged too, though their
    # residual on that operator is small (a value near 7.48 here, of no eigenvector of M)
    assert not np.asarray(power.converged).any()
    assert (np.asarray(power.residuals) < eigensolvers.RESIDUAL_TOLERANCE).sum() == 2
    pairs = eigensolvers.lanczos(lambda u: M @ u, v0, k=3)
    assert np.asarray(pairs.converged).all() and (np.asarray(pairs.residuals) < 1e-3).all()
    np.testing.assert_allclose(np.sort(pairs.values), np.sort(_top_by_magnitude(M, 3)), rtol=1e-4)
    U_kxP = pairs.vectors
    np.testing.assert_allclose(U_kxP @ np.asarray(M), pairs.values[:, None] * U_kxP, atol=1e-4)
    assert (np.diff(np.abs(pairs.values)) <= 0).all()
    # every product counted: ARPACK's and one per residual, within its cap of k * max_iterations (+ k)
    assert 3 < int(pairs.iterations[0]) <= 3 * eigensolvers.MAX_ITERATIONS + 3
    assert (np.asarray(pairs.iterations) == pairs.iterations[0]).all()


def test_lanczos_agrees_with_power_iteration_and_eigvalsh_on_a_models_hessian():
    # PK22's tolerance leaves power iteration within 10% of some eigenvalue (RESIDUAL_TOLERANCE); a tight
    # one converges it to the top 3 on these mini-batches, which Lanczos finds at PK22's tolerance
    params, _ = _tiny()
    batches = jax.tree.map(lambda *xs: jnp.stack(xs), *[_tiny(seed)[1] for seed in (70, 73, 75)])
    key = jax.random.key(5)
    power = jax.jit(
        lambda p, b, k: hessian.spectrum(
            _tiny_loss, p, b, k, k=3, tolerance=1e-7, max_iterations=3000
        )
    )(params, batches, key)
    lz = hessian.spectrum(_tiny_loss, params, batches, key, k=3, method="lanczos")
    assert lz.values.shape == (3, 3) and lz.vectors is None and np.asarray(lz.converged).all()
    ok = np.asarray(power.converged)
    assert ok.sum() >= 7  # where power iteration converged, the two agree
    np.testing.assert_allclose(
        np.asarray(lz.values)[ok], np.asarray(power.values)[ok], rtol=1e-3, atol=1e-4
    )
    for m in range(3):
        H = _dense_hessian(params, jax.tree.map(lambda a: a[m], batches))
        np.testing.assert_allclose(
            np.sort(lz.values[m]), np.sort(_top_by_magnitude(H, 3)), rtol=1e-3, atol=1e-4
        )
    # one mini-batch alone, from its key: the same as its row
    one = hessian.top_eigenvalues(
        _tiny_loss,
        params,
        jax.tree.map(lambda a: a[0], batches),
        jax.random.split(key, 3)[0],
        k=3,
        method="lanczos",
    )
    np.testing.assert_allclose(one.values, lz.values[0], rtol=1e-5)


def test_lanczos_without_convergence_within_its_cap_has_no_value_and_summaries_refuse_it():
    # 60 eigenvalues of nearly one magnitude, a tolerance ARPACK cannot meet in 2 * 3 products
    M = _known_operator(np.linspace(1.0, 1.01, 60) * np.where(np.arange(60) % 2, 1.0, -1.0))
    pairs = eigensolvers.lanczos(
        lambda u: M @ u, jnp.ones(60), k=3, max_iterations=2, tolerance=1e-9
    )
    missing = np.isnan(pairs.values)
    assert missing.any() and not np.asarray(pairs.converged)[missing].any()
    assert missing[-missing.sum() :].all()  # the missing ones last
    # ARPACK's products within the cap of k * max_iterations (the rest: one per residual of a found pair)
    assert int(pairs.iterations[0]) - int((~missing).sum()) <= 3 * 2
    stacked = jax.tree.map(lambda a: np.stack([a, a]), dataclasses.replace(pairs, vectors=None))
    with pytest.raises(ConfigError, match="did not converge within the cap and have no value"):
        hessian.summaries(stacked)


def test_lanczos_is_refused_under_jit_and_its_cap_where_the_step_would_ignore_it():
    params, batch = _tiny()
    with pytest.raises(ConfigError, match="method='lanczos' runs ARPACK on the host"):
        jax.jit(
            lambda p: hessian.top_eigenvalues(
                _tiny_loss, p, batch, jax.random.key(0), method="lanczos"
            )
        )(params)
    with pytest.raises(ConfigError, match="unknown method 'lanczo'"):
        hessian.spectrum(
            _tiny_loss,
            params,
            jax.tree.map(lambda a: a[None], batch),
            jax.random.key(0),
            method="lanczo",
        )
    # the bare HVP of Lanczos takes no cap, and power's host loop takes its cap from its step
    with pytest.raises(ConfigError, match="give them to spectrum_on_host"):
        hessian.spectrum_step(_tiny_loss, max_iterations=50, method="lanczos")
    with pytest.raises(ConfigError, match="give them to spectrum_step"):
        hessian.spectrum_on_host(
            None,
            params,
            jax.tree.map(lambda a: a[None], batch),
            jax.random.key(0),
            max_iterations=50,
        )
    M = jnp.diag(jnp.arange(1.0, 4.0))
    with pytest.raises(ConfigError, match=r"1 <= k < P for method 'lanczos'"):
        eigensolvers.lanczos(lambda v: M @ v, jnp.ones(3), k=3)
