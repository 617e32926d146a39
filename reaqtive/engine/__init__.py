"""The query engine: standing queries by URI, checkpoints, recovery, durable ingress and egress.

Not built yet: see the project's issue on the query engine. The package exists so the layout is fixed.
"""
