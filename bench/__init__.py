"""Benchmarks of Tollgate, run by ``make bench``: reports written to bench/results/, never pass or fail."""
