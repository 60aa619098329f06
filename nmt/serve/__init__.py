"""The HTTP service (`nmt-serve`): the native API, LibreTranslate's and DeepL's APIs, keys and metrics."""
