"""What several benchmarks share: the streaming client and the endpoint calls, the seeded
workload, the open-loop trial runner, the raw records, and the statistics, reports and
plots computed from them."""
