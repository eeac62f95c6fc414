"""attnlab: Transformer architecture ablations with PyTorch Lightning and Hydra."""

__version__ = "0.1.0"
