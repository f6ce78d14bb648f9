"""``bench tiers``: request tiers with objectives of their own, in changing phases."""
