"""Trace-driven replay (issue 14): acceptance recorded on this machine, priced under any device's
verify cost. So far: the device models (``device``)."""
