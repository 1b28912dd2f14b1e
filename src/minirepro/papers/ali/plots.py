"""Figures of the ALI chapter."""
