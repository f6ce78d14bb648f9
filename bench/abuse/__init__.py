"""``bench abuse``: bounded hostile or oversized loads against a gateway on loopback.

``base`` holds what every scenario shares; ``burst``, ``limits``, ``hostile`` and ``cold``
hold the scenarios; ``scenarios`` names them; ``command`` runs them and reports.
"""
