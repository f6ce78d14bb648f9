"""``bench episodes``: interference episodes replayed for every arm on one gateway, paired."""
