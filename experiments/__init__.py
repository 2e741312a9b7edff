"""Experiments that span the stages (train, then evaluate) and write their figures into docs/."""
