"""study: comparative mechanistic interpretability of small networks on synthetic tasks."""

__version__ = "0.1.0"
