"""Cooperation analytics over traces."""
