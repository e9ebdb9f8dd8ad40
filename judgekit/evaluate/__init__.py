"""Evaluation: sweeps of rules over a task, the run loop and grading, summaries, plots and closed-form analysis."""
