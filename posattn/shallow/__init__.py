"""LWLC23's shallow-ViT regime: token data, Eq. (1), SGD on the hinge loss, attention concentration,
sample complexity (phase maps), the exact noiseless population and token sparsification.

Modules: config (TokenConfig, ModelConfig, SGDConfig), data (sampler), model (Eq. (1) and the
attention-free network), init (proper initial model), train (SGD in one lax.scan), metrics, grid (runs
vmapped over seeds and grid cells), phase_map (maps, boundaries, power-law fits), dynamics (attention
over iterations), population (exact, tau = 0), sparsify (token removal policies).
"""

from posattn.shallow.config import ModelConfig, SGDConfig, TokenConfig
from posattn.shallow.data import Tokens, sample
from posattn.shallow.init import init_params
from posattn.shallow.model import forward, hinge_loss
