"""Ahead-of-time compilation of a model's analysis programs: same results, no retracing."""

import jax
import jax.numpy as jnp
import numpy as np

from posattn import compile_options
from posattn.analysis import programs


def test_compile_all_gives_programs_that_run_without_retracing():
    traces = []

    def square_sum(x):
        traces.append(1)  # runs only while jax traces the function
        return jnp.sum(x**2)

    x = jnp.arange(6.0)
    compiled, seconds = programs.compile_all(
        {"sq": (jax.jit(square_sum), (x,)), "neg": (jax.jit(lambda a, b: a - b), (x, x))}
    )
    assert set(seconds) == {"sq", "neg"} and all(s >= 0 for s in seconds.values())
    np.testing.assert_allclose(compiled["sq"](x), 55.0)
    np.testing.assert_allclose(compiled["sq"](x + 1), 91.0)  # new values, same shapes: same program
    np.testing.assert_allclose(compiled["neg"](x, 2 * x), -x)
    assert len(traces) == 1


def test_cpu_programs_compile_with_the_options_of_compiler_options():
    # an unknown option name or value would make compile() fail
    x = jnp.arange(4.0)
    lowered = jax.jit(jnp.cumsum).lower(x)
    np.testing.assert_array_equal(
        lowered.compile(compiler_options=compile_options.run_once("cpu"))(x), [0.0, 1.0, 3.0, 6.0]
    )
