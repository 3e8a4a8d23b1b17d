"""dqgen."""
