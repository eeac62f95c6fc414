"""The parts a model is built from, each with its config: the keys it reads, their defaults
and rules, and the class it builds — declared once, with no torch (:mod:`.core`).

Importing this package declares every built-in component: the architectures
(:mod:`.architectures`), the parts of a Transformer layer (:mod:`.layers`; the mixture of
experts, :mod:`.moe`), position schemes (:mod:`.positions`), attention (:mod:`.attention`),
and the rules between them (:mod:`.rules`). A model's resolved config is
:class:`attnlab.model_config.ModelConfig`.
"""

from attnlab.components import architectures, attention, layers, moe, positions
from attnlab.components.core import FAMILIES, KEYS, ComponentConfig, Family, Key, locate
from attnlab.components.feeding import TASK_KINDS, Feeding

__all__ = [
    "FAMILIES",
    "KEYS",
    "TASK_KINDS",
    "ComponentConfig",
    "Family",
    "Feeding",
    "Key",
    "architectures",
    "attention",
    "layers",
    "locate",
    "moe",
    "positions",
]
