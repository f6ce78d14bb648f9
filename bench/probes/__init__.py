"""Single-client probes of a running gateway, outside the load protocol: what a prefill
chunk costs beside a decode, and a newcomer's first answers."""
