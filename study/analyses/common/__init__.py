"""Helpers shared by several analyses (no registry entries here)."""
