"""Training a DSpark drafter for a target on this machine (issue 15)."""
