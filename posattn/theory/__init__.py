"""JSL22's theory regime: the data of Assumption 1, the simplified ViT of Eq. (T), and how GD learns it.

Tools only: config, task, data (and its `datasets/`), keys, model, optim, step, draw, programs,
host_loop, gd, grid, fused, metrics, evaluation, presets; the exact population risk in `population/`.
JSL22's study of them (the phases, the claims, the reports) is `posattn.papers.jsl22`; their figures are in `posattn.plots.theory`.
"""

from posattn.theory.config import GDConfig, TheoryConfig
from posattn.theory.data import (
    Task,
    grid_sets,
    labelling_function,
    make_task,
    same_set_mask,
    sample,
    set_index,
)
from posattn.theory.datasets import register_dataset
from posattn.theory.gd import fit, fit_seeds
from posattn.theory.grid import fit_grid, fit_sizes
from posattn.theory.metrics import (
    parameter_metrics,
    patch_association,
    top_c_overlap,
    within_across_means,
)
from posattn.theory.model import attention, empirical_risk, forward, init_params, sigma
from posattn.theory.optim import gradient_descent
from posattn.theory.presets import PRESETS, get_preset
from posattn.theory.step import descend, init_state, train_chunk
