"""Capacity under SLO: ``bench sweep`` (the protocol at several rates per arm, optionally in
paired blocks) and the declarative studies that drive it (``bench/studies/*.toml``)."""
