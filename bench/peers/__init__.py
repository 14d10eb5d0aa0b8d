"""Two small implementations of SPEC.md that the benchmark compares the service with."""
