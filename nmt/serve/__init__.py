"""The HTTP service (`nmt-serve`): translation, attention and the static attention explorer page.

`app.create_app` builds the FastAPI application around one `Translator`; `batcher.Batcher` gathers requests
into batches decoded by one worker thread; `command.main` is the console command.
"""
