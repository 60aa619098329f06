"""nmt: a German-English neural machine translation trainer."""

__version__ = "0.1.0"
