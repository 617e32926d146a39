"""Running reaqtive query definitions on Apache Spark Structured Streaming (the ``spark`` extra).

Not built yet: see the project's issue on Spark. The package exists so the layout is fixed.
"""
