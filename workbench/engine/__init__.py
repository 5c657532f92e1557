"""Engine: requests, scheduling, forward batches, model runners and the EAGLE3 worker."""
