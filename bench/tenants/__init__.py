"""``bench tenants``: two or more tenants with different weights and demands on one gateway.

``base`` holds the options, the run and the outcome every scenario shares; ``client`` sends
a tenant's requests (one stream, a closed loop that floods); ``admin`` reads and patches the
tenants' limits (restoring them afterwards); ``metrics`` reads the per-tenant series of
``/metrics``; ``report`` turns records and metric deltas into each tenant's figures and the
table; ``trickle``, ``weights`` and ``token_rate`` are the scenarios, ``scenarios`` names
them, and ``command`` runs them.
"""
