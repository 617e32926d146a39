"""Tools around the engine's store that work without opening an engine (``reaqtive inspect``)."""
