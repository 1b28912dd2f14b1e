"""Figures of the attribution-attack chapter."""
