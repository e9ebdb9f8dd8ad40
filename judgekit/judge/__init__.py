"""Judges: training data from mined mismatches, the Lightning training loop, saved heads and their export."""
