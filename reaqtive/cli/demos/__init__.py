"""Runnable demonstrations behind ``reaqtive demo``."""
