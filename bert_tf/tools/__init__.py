"""User tools around training: doctor, estimate, predict and the demo."""
