"""Torch networks of the model families (imported lazily by the builders in `study/models/`)."""
