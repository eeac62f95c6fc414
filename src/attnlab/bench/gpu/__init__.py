"""The GPU suite: attnlab on one CUDA GPU in one command, every step with a status.

    scripts/gpu_suite.sh [--out DIR] [--nanogpt DIR] [--budget 480]
    python -m attnlab.bench.gpu.suite …        # the same, attnlab importable
    python -m attnlab.bench.gpu.check --tiny   # one step alone: GPT-2-124M shape, MFU

:mod:`~attnlab.bench.gpu.suite` runs the steps of :mod:`~attnlab.bench.gpu.steps`, each a
subprocess (:mod:`~attnlab.bench.gpu.jobs`); :mod:`~attnlab.bench.gpu.probes` holds the
measurements that need a process of their own. See docs/performance.md, "GPU suite".
"""
