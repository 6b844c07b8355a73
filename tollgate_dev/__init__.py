"""The development harness: the local system, the simulated provider, samples, the chaos run, the
benchmark baselines and the moto helpers. Never in the Lambda asset or the worker image; it imports
production code, production code never imports it."""
