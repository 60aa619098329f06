"""nmt: a German-English neural machine translation trainer."""

__version__ = "0.1.0"

# The built-in attention variants register their settings (model.window, model.stride) with the config on
# import, so a config naming them loads through any entry point, nmt.config.load_config alone included.
import nmt.models.attention  # noqa: E402, F401
