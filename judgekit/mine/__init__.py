"""Mining: counterfactual labelling of draft/target mismatches (AutoJudge's semi-greedy search)."""
