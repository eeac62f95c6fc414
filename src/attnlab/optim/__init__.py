"""The optimiser and the learning-rate schedule: ``optim.name`` and ``optim.schedule``.

Each optimiser and each schedule is one small config class in :mod:`attnlab.optim.registry`
(no torch) that names the ``optim.*`` keys it reads and quotes its update rule and paper;
:mod:`attnlab.optim.build` builds the optimiser (torch), :mod:`attnlab.optim.schedules`
computes the learning-rate factor of a step. A key that neither the chosen optimiser, the
chosen schedule nor every optimiser reads is refused.
"""
