"""Exact population risk (P): against Monte Carlo, finite differences, brute-force
quadrature, the general-A path, and the invariance that reduces GD to three scalars."""

import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from posattn import mesh as mesh_lib
from posattn.errors import ConfigError
from posattn.theory import (
    GDConfig,
    Task,
    TheoryConfig,
    fit,
    make_task,
    patch_association,
    same_set_mask,
    sample,
)
from posattn.theory.model import attention, sigma
from posattn.theory.optim import gradient_descent
from posattn.theory.population import (
    check_config,
    check_start,
    choose_method,
    exact_risk,
    heat,
    population_grad,
    population_risk,
)
from posattn.theory.population.multiset import (
    count_types,
    multiset_tables,
    n_multisets,
    three_value_form,
)
from posattn.theory.population.reduced import ReducedState, reduced_state, reduced_trajectory
from posattn.theory.presets import get_preset
from posattn.theory.step import descend, init_state

SMALL = TheoryConfig(D=16, C=4, d=8, q=0.4)  # the `small` preset with a small d (cheap sampling)
PAPER = get_preset("paper")[0]
CHEAP = TheoryConfig(
    D=16, C=8, d=8, q=0.4, partition="random"
)  # general path with 2 * 3^8 patterns


def three_value_A(cfg, task, a, gamma, rho):
    same = np.asarray(same_set_mask(task.sets))
    return jnp.asarray(np.where(np.eye(cfg.D, dtype=bool), a, np.where(same, gamma, rho)))


def unit_perp(key, w):
    z = jax.random.normal(key, w.shape, w.dtype)
    z = z - (z @ w) * w
    return z / jnp.linalg.norm(z)


# ---------------------------------------------------------------------------------------------------
# The enumeration tables and the heat expansion, on their own.


def test_multiset_tables_match_brute_force():
    assert n_multisets(4, 9) == 319_770 and len(count_types(4)) == 15
    # C=2, L=3: every delta of the 4 non-signal patches, grouped by the multiset of set types.
    cfg_C, cfg_L, q = 2, 3, 0.3
    tables = multiset_tables(cfg_C, cfg_L, q)
    types = [tuple(t) for t in count_types(cfg_C)]
    brute = {}
    for delta in itertools.product((1, -1, 0), repeat=(cfg_L - 1) * cfg_C):
        p = math.prod(q / 2 if x else 1 - q for x in delta)
        sets = [delta[i * cfg_C : (i + 1) * cfg_C] for i in range(cfg_L - 1)]
        key = tuple(sorted(types.index((s.count(1), s.count(-1), s.count(0))) for s in sets))
        brute[key] = brute.get(key, 0) + p
    got = {}
    for m, w in zip(tables.mult.reshape(-1, len(types)), tables.weight.reshape(-1)):
        if w > 0:
            m = m.astype(int).copy()
            m[0] -= 1  # the signal set
            got[tuple(sorted(np.repeat(np.arange(len(types)), m)))] = w
    assert set(got) == set(brute)
    for key in brute:
        assert got[key] == pytest.approx(brute[key], rel=1e-12)
    assert tables.weight.sum() == pytest.approx(1.0, abs=1e-14)


@pytest.mark.parametrize("activation", ["cubic", "quintic"])
def test_heat_laplacians_match_autodiff(activation):
    # Lap f and Lap^2 f of heat.py against Hessians of f(g) = phi(sum sigma(u + M g)) at g = 0.
    with jax.enable_x64(True):
        k1, k2 = jax.random.split(jax.random.key(0))
        u = 0.6 * jax.random.normal(k1, (3,))
        M = jax.random.normal(k2, (3, 3)) / 2
        f = lambda g: jax.nn.softplus(-heat.activation_derivatives(u + M @ g, activation)[0].sum())
        lap = lambda h: lambda g: jnp.trace(jax.hessian(h)(g))
        g0 = jnp.zeros(3)
        lap1, lap2 = jax.jit(lambda g: (lap(f)(g), lap(lap(f))(g)))(g0)
        # expected_loss = phi + t/2 Lap + t^2/8 Lap^2: read the two coefficients off t = 1, 2.
        e1, e2 = (heat.expected_loss_dense(u, M @ M.T, t, activation) for t in (1.0, 2.0))
        phi = f(g0)
        got2 = 4 * (e2 - 2 * e1 + phi)  # e2 - 2 e1 + phi = (4/8 - 2/8) Lap^2
        got1 = 2 * (e1 - phi - got2 / 8)
        np.testing.assert_allclose(got1, lap1, rtol=1e-10)
        np.testing.assert_allclose(got2, lap2, rtol=1e-10)


def test_heat_expansion_error_is_third_order():
    # E_g phi(sum sigma(u + M g)), g ~ N(0, t I_3), by a 40^3-node Gauss-Hermite rule (exact to ~1e-14
    # here), against the expansion: the error falls 8x when t halves.
    with jax.enable_x64(True):
        u = jnp.array([0.9, -0.3, 0.5])
        M = jnp.array([[1.0, 0.3, 0.2], [0.1, 0.8, -0.2], [0.3, 0.2, 0.9]])
        x, w = np.polynomial.hermite_e.hermegauss(40)
        w = w / w.sum()
        nodes = jnp.asarray(np.stack(np.meshgrid(x, x, x, indexing="ij"), -1).reshape(-1, 3))
        weights = jnp.asarray(np.einsum("i,j,k->ijk", w, w, w).reshape(-1))
        errors = []
        for t in (0.02, 0.01, 0.005):
            F = ((u + jnp.sqrt(t) * nodes @ M.T) ** 3).sum(-1)
            exact = (weights * jax.nn.softplus(-F)).sum()
            errors.append(float(heat.expected_loss_dense(u, M @ M.T, t, "cubic") - exact))
        ratios = np.array(errors[:-1]) / np.array(errors[1:])
        np.testing.assert_allclose(ratios, 8.0, rtol=0.1)
        assert abs(errors[0]) > 1e-9  # the comparison is not vacuous


# ---------------------------------------------------------------------------------------------------
# The two enumerations agree, and the multiset path's full-matrix gradient is the general one.


@pytest.mark.slow
def test_three_value_path_matches_general_path_at_D16():
    with jax.enable_x64(True):
        task = make_task(jax.random.key(0), SMALL)
        A = three_value_A(SMALL, task, 3.0, 1.0, -0.5)
        v = 0.12 * task.w_star + 0.02 * math.sqrt(SMALL.d) * unit_perp(
            jax.random.key(1), task.w_star
        )
        params = {"A": A, "v": v}
        assert choose_method(params, SMALL, task) == "multiset"
        r3, g3 = population_grad(params, SMALL, task, "multiset")
        rg, gg = population_grad(params, SMALL, task, "general")
        np.testing.assert_allclose(r3, rg, rtol=1e-12)
        np.testing.assert_allclose(g3["v"], gg["v"], rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(g3["A"], gg["A"], rtol=1e-9, atol=1e-15)
        # The full-matrix gradient is three-valued: dR/dgamma spread over the D (C-1) within entries.
        same = np.asarray(same_set_mask(task.sets)) & ~np.eye(SMALL.D, dtype=bool)
        assert np.ptp(np.asarray(gg["A"])[same]) < 1e-12 * np.abs(gg["A"]).max()
        assert np.abs(np.asarray(g3["A"])[same] - np.asarray(g3["A"])[same][0]).max() == 0


# ---------------------------------------------------------------------------------------------------
# Against Monte Carlo from the vmapped sampler: 10^6 samples, risk and gradient within 3 standard errors.


def monte_carlo(cfg, task, points, directions, n=1_000_000, chunk=50_000):
    """Mean and standard error over n samples of the loss and of its directional derivatives.

    One matmul per chunk gives every <v, X_j> and <dv, X_j> needed; the derivative along (dA, dv) is
    the jvp of the loss as a function of (A, <v, X_j>) with tangent (dA, <dv, X_j>).
    """
    V = jnp.stack(
        [
            x
            for params, dirs in zip(points, directions)
            for x in [params["v"]] + [d["v"] for d in dirs]
        ],
        -1,
    )

    def stats(key):
        X, y = sample(key, cfg, task, chunk)
        XV = X @ V  # (chunk, D, n_vectors)
        out, col = [], 0
        for params, dirs in zip(points, directions):

            def loss(A, xv):
                u = xv @ attention(A, cfg).T
                return jax.nn.softplus(
                    -y * sigma(cfg.D * u if cfg.scale_by_D else u, cfg.activation).sum(-1)
                )

            xv = XV[..., col]
            values = [
                jax.jvp(loss, (params["A"], xv), (d["A"], XV[..., col + 1 + i]))[1]
                for i, d in enumerate(dirs)
            ]
            col += 1 + len(dirs)
            per_sample = jnp.stack([loss(params["A"], xv), *values])  # (1 + n_dirs, chunk)
            out.append(jnp.stack([per_sample.sum(1), (per_sample**2).sum(1)]))
        return out

    keys = jax.random.split(jax.random.key(2024), n // chunk)
    totals = jax.lax.map(stats, keys)
    results = []
    for s in totals:
        first, second = s.sum(0)
        mean = first / n
        results.append((np.asarray(mean), np.asarray(jnp.sqrt((second / n - mean**2) / n))))
    return results


def check_against_monte_carlo(cfg, task, points, method):
    directions = []
    for i, params in enumerate(points):
        keys = jax.random.split(jax.random.key(100 + i), 2)
        dA = jax.random.normal(keys[0], params["A"].shape) * (1 - jnp.eye(cfg.D))
        if method == "multiset":  # a three-value direction: within-set entries up, across down
            same = same_set_mask(task.sets) & ~jnp.eye(cfg.D, dtype=bool)
            dA = jnp.where(same, 1.0, -0.4) * (1 - jnp.eye(cfg.D))
        dv = jax.random.normal(keys[1], params["v"].shape)
        zero_A = jnp.zeros_like(dA)
        directions.append(
            [
                {"A": dA, "v": jnp.zeros_like(dv)},
                {"A": zero_A, "v": dv},
                {"A": zero_A, "v": task.w_star},
            ]
        )
    mc = monte_carlo(cfg, task, points, directions)
    with jax.enable_x64(True):
        for params, dirs, (mean, se) in zip(points, directions, mc):
            p64 = jax.tree.map(lambda x: jnp.asarray(x, jnp.float64), params)
            risk, grads = population_grad(
                p64, cfg, task._replace(w_star=task.w_star.astype(float)), method
            )
            exact = [risk] + [sum((grads[k] * d[k]).sum() for k in grads) for d in dirs]
            z = (np.array([float(e) for e in exact]) - mean) / se
            assert np.all(np.abs(z) < 3), (z, mean, se)
            # The test has power: the risk and the derivative along w* are resolved to a few percent.
            assert se[0] < 0.01 * mean[0] and se[3] < 0.05 * abs(mean[3]), (mean, se)


@pytest.mark.slow
def test_general_path_against_monte_carlo_small_preset():
    task = make_task(jax.random.key(3), SMALL)
    points = []
    for i, (alpha, noise) in enumerate([(0.1, 0.2), (0.13, 0.1)]):
        k1, k2 = jax.random.split(jax.random.key(10 + i))
        A = 3.0 * jnp.eye(SMALL.D) + jax.random.normal(k1, (SMALL.D, SMALL.D))
        # per-patch noise std s ||v_perp|| = noise * alpha (the expansion's accurate range, heat.py)
        v = alpha * task.w_star + noise * alpha * math.sqrt(SMALL.d) * unit_perp(k2, task.w_star)
        points.append({"A": A, "v": v})
    check_against_monte_carlo(SMALL, task, points, "general")


@pytest.mark.slow
def test_three_value_path_against_monte_carlo_paper_preset():
    # The paper preset's D=36, C=4, L=9, q=0.4 with d=8: d enters (P) only through the temperature and
    # s^2 = 1/d, and the sampler's cost (10^6 x 36 x d normals) is linear in d.
    cfg = dataclasses.replace(PAPER, d=8)
    task = make_task(jax.random.key(4), cfg)
    points = []
    for i, (a, gamma, rho, alpha, noise) in enumerate(
        [(8.0, 2.0, -1.0, 0.05, 0.25), (8.0, 12.0, 0.5, 0.035, 0.0)]
    ):
        v = alpha * task.w_star + noise * alpha * math.sqrt(cfg.d) * unit_perp(
            jax.random.key(20 + i), task.w_star
        )
        points.append({"A": three_value_A(cfg, task, a, gamma, rho).astype(jnp.float32), "v": v})
    check_against_monte_carlo(cfg, task, points, method="multiset")


# ---------------------------------------------------------------------------------------------------
# Derivatives.


@pytest.mark.parametrize(
    "cfg, method",
    [
        (CHEAP, "general"),
        (SMALL, "multiset"),
        (TheoryConfig(D=16, C=4, d=8, q=0.3, activation="quintic", noise="isotropic"), "multiset"),
    ],
)
def test_gradient_matches_central_differences(cfg, method):
    with jax.enable_x64(True):
        task = make_task(jax.random.key(5), cfg)
        task = task._replace(w_star=task.w_star.astype(float))
        k1, k2, k3 = jax.random.split(jax.random.key(6), 3)
        if method == "general":
            A = 2.0 * jnp.eye(cfg.D) + jax.random.normal(k1, (cfg.D, cfg.D))
            dA = jax.random.normal(k3, (cfg.D, cfg.D))
        else:
            A = three_value_A(cfg, task, 5.0, 1.5, -0.5)
            dA = three_value_A(cfg, task, 0.3, 1.0, -0.7)
        v = 0.08 * task.w_star + 0.02 * math.sqrt(cfg.d) * unit_perp(k2, task.w_star)
        params = {"A": A, "v": v}
        _, grads = population_grad(params, cfg, task, method)
        for direction in ({"A": dA, "v": 0 * v}, {"A": 0 * A, "v": jax.random.normal(k3, v.shape)}):
            h = 1e-5
            shift = lambda e: jax.tree.map(lambda p, d: p + e * d, params, direction)
            fd = (
                population_risk(shift(h), cfg, task, method)
                - population_risk(shift(-h), cfg, task, method)
            ) / (2 * h)
            exact = sum((grads[k] * direction[k]).sum() for k in grads)
            np.testing.assert_allclose(exact, fd, rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("cfg, method", [(CHEAP, "general"), (PAPER, "multiset")])
def test_gradient_along_v_perp_is_exactly_zero_at_v_perp_zero(cfg, method):
    with jax.enable_x64(True):
        task = make_task(jax.random.key(7), cfg)
        # w* = e_1, so v = alpha w* has v_perp = 0 exactly in floating point.
        task = Task(task.sets, jnp.zeros(cfg.d).at[0].set(1.0))
        A = (
            three_value_A(cfg, task, 4.0, 1.0, 0.5)
            if method == "multiset"
            else (4.0 * jnp.eye(cfg.D) + jax.random.normal(jax.random.key(8), (cfg.D, cfg.D)))
        )
        params = {"A": A, "v": 0.1 * task.w_star}
        _, grads = population_grad(params, cfg, task, method)
        assert np.all(np.asarray(grads["v"])[1:] == 0.0)
        assert abs(float(grads["v"][0])) > 1e-3
        # Off the line, the gradient along v_perp is 2 s^2 (dR/dt) v_perp: not zero, parallel to v_perp.
        perp = jnp.zeros(cfg.d).at[1].set(0.3)
        _, grads = population_grad({"A": A, "v": params["v"] + perp}, cfg, task, method)
        g = np.asarray(grads["v"])
        assert g[1] != 0 and np.all(g[2:] == 0.0)


# ---------------------------------------------------------------------------------------------------
# The invariance that keeps A three-valued under GD on (P), and the scalar recursions.


@pytest.mark.slow
def test_population_gd_keeps_three_values_and_follows_the_scalar_recursions():
    cfg, lr, lr_A, steps = CHEAP, 0.002, 2000.0, 200
    with jax.enable_x64(True):
        task = make_task(jax.random.key(9), cfg)
        task = task._replace(w_star=task.w_star.astype(float))
        params = {"A": three_value_A(cfg, task, 4.0, 0.0, 0.0), "v": 0.05 * task.w_star}

        gd = gradient_descent()

        @jax.jit
        def run(params):
            def step(state, _):
                grads = jax.grad(population_risk)(
                    state["params"], cfg, task, "general"
                )  # full matrix, any A
                state = descend(state, grads, gd)
                p = state["params"]
                a, gamma, rho, dev = three_value_form(p["A"], task.sets)
                perp = jnp.linalg.norm(p["v"] - (p["v"] @ task.w_star) * task.w_star)
                return state, (p["v"] @ task.w_star, gamma, rho, dev, perp)

            return jax.lax.scan(
                step, init_state(params, gd, {"lr": lr, "lr_A": lr_A}), None, length=steps
            )

        final, (alpha, gamma, rho, dev, perp) = run(params)
        scale = float(jnp.abs(final["params"]["A"]).max())
        assert float(dev.max()) < 1e-12 * scale, float(dev.max())
        assert float(perp.max()) < 1e-15 * float(alpha.max())
        states, _ = reduced_trajectory(reduced_state(params, task), cfg, 4.0, lr, lr_A, steps)
        np.testing.assert_allclose(states.alpha, alpha, rtol=1e-10)
        np.testing.assert_allclose(states.gamma, gamma, rtol=1e-9, atol=1e-13)
        np.testing.assert_allclose(states.rho, rho, rtol=1e-9, atol=1e-13)
        assert np.all(np.asarray(states.p) == 0)
        # The run is not trivial: v grew and the within-set entries separated from the across ones.
        assert alpha[-1] > 1.5 * 0.05 and gamma[-1] - rho[-1] > 1.0


@pytest.mark.slow
def test_reduced_recursions_with_v_perp_match_full_gd():
    # With v_perp != 0, only ||v_perp||^2 matters: the fourth recursion p <- p (1 - 2 lr dR/dp)^2.
    cfg, lr, lr_A, steps = PAPER, 0.02, 30.0, 5
    with jax.enable_x64(True):
        task = make_task(jax.random.key(11), cfg)
        task = task._replace(w_star=task.w_star.astype(float))
        v = 0.05 * task.w_star + 0.1 * unit_perp(jax.random.key(12), task.w_star)
        params = {"A": three_value_A(cfg, task, 8.0, 0.5, 0.2), "v": v}
        start = reduced_state(params, task)
        gd = gradient_descent()
        state = init_state(params, gd, {"lr": lr, "lr_A": lr_A})
        for _ in range(steps):
            _, grads = population_grad(state["params"], cfg, task, "multiset")
            state = descend(state, grads, gd)
        states, _ = reduced_trajectory(start, cfg, 8.0, lr, lr_A, steps)
        end = reduced_state(state["params"], task)
        for name in ReducedState._fields:
            np.testing.assert_allclose(getattr(states, name)[-1], getattr(end, name), rtol=1e-11)
        assert float(end.gamma - end.rho) != float(start.gamma - start.rho)
    with pytest.raises(ConfigError, match="GD in closed form: lr must be a step size, not"):
        reduced_trajectory(start, cfg, 8.0, optax.adam(1e-3), lr_A, steps)


def test_patch_association_iff_min_diagonal_gamma_above_rho():
    task = make_task(jax.random.key(0), SMALL)
    values = [-1.0, 0.0, 0.5, 1.0]
    for a, gamma, rho in itertools.product(values, repeat=3):
        A = three_value_A(SMALL, task, a, gamma, rho)
        assert bool(patch_association(A, task)[1]) == (min(a, gamma) > rho), (a, gamma, rho)


# ---------------------------------------------------------------------------------------------------
# The method is the caller's, static; starts and problems it would get wrong are refused.


@pytest.mark.slow
def test_method_is_static_and_wrong_starts_are_refused():
    task = make_task(jax.random.key(0), PAPER)
    three = {"A": three_value_A(PAPER, task, 8.0, 1.0, 0.0), "v": 0.1 * task.w_star}
    assert choose_method(three, PAPER, task) == "multiset"
    check_start(three, PAPER, task, "multiset")
    bent = {**three, "A": three["A"].at[0, 1].add(0.1)}
    with pytest.raises(ConfigError, match="not three-valued.*population_mc"):
        choose_method(bent, PAPER, task)  # D=36: the general path is out of reach too
    with pytest.raises(ConfigError, match="not three-valued"):
        check_start(bent, PAPER, task, "multiset")
    with pytest.raises(ConfigError, match="patterns"):
        check_config(PAPER, "general")
    with pytest.raises(ConfigError, match="structured"):
        check_config(TheoryConfig(D=16, C=4, d=16, dataset="gaussian_cnn"), "multiset")
    # GD refuses a start that the multiset path would read through its three means, before any step.
    small_task = make_task(jax.random.key(0), SMALL)
    A = jax.random.normal(jax.random.key(1), (16, 16))
    params = {"A": A, "v": 0.1 * small_task.w_star}
    assert choose_method(params, SMALL, small_task) == "general"
    gd = GDConfig(risk="population_exact", steps=2, eval_every=1, n_test=64)
    with pytest.raises(ConfigError, match="not three-valued"):
        fit(jax.random.key(0), SMALL, gd, task=small_task, params=params)
    # Why: on such an A the multiset path computes another matrix's risk. Compiled with the method
    # static (as in GD), each path gives its eager value, and the two differ here.
    traced = jax.jit(exact_risk, static_argnames=("cfg", "method"))
    risks = {}
    for method in ("multiset", "general"):
        risks[method] = float(population_risk(params, SMALL, small_task, method))
        np.testing.assert_allclose(
            traced(params, SMALL, small_task, method), risks[method], rtol=1e-5
        )
    assert abs(risks["multiset"] - risks["general"]) > 1e-3 * risks["general"]


@pytest.mark.slow
def test_patterns_split_over_devices_give_the_same_risk_and_gradient():
    """The multiset pass on a "data" mesh: each device takes its share of the chunks of patterns (the
    10 chunks at L=7, padded to 16 over 8 devices), the sums are added over the devices."""
    cfg = TheoryConfig(D=28, C=4, d=8, q=0.4, partition="random")
    task = make_task(jax.random.key(0), cfg)
    params = {
        "A": three_value_A(cfg, task, 3.0, 1.0, -0.5),
        "v": 0.3 * task.w_star + 0.05 * unit_perp(jax.random.key(1), task.w_star),
    }
    mesh = mesh_lib.data_mesh()
    risk_and_grad = lambda mesh: jax.jit(
        jax.value_and_grad(lambda p, task: exact_risk(p, cfg, task, "multiset", mesh=mesh))
    )
    want = risk_and_grad(None)(params, task)
    got = risk_and_grad(mesh)(*jax.device_put((params, task), mesh_lib.replicated(mesh)))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    for name in ("A", "v"):
        np.testing.assert_allclose(
            got[1][name],
            want[1][name],
            rtol=0,
            atol=1e-5 * float(jnp.abs(want[1][name]).max()),
            err_msg=name,
        )
