"""The HTTP service (`nmt-serve`): translation, attention and the static attention explorer page, LibreTranslate's
and DeepL's APIs for existing clients, API keys and Prometheus metrics.

`app.create_app` builds the native FastAPI application around one `Translator`; `batcher.Batcher` gathers
requests into batches decoded by one worker thread; `libretranslate` and `deepl` add the compatible endpoints
(sharing `compat`), `auth` the keys and rate limit, `metrics` the metrics and access log, and
`service.create_service` puts them together; `command.main` is the console command.
"""
