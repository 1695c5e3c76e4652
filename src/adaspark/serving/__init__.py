"""Serving: our engine behind an OpenAI-compatible HTTP API, the real ``llama-server``, and the
streaming client that times both on the client's clock (§4.1).

- ``requests``: a chat-completions request body, checked;
- ``service``: one arm's engine behind a queue (one request at a time), its per-request counts;
- ``http``: the routes (Starlette) and server-sent events;
- ``main``: ``adaspark serve`` and ``python -m adaspark.serving.main``, and their options;
- ``chat``, ``tool_calls``: chat templates, tool rendering and call parsing;
- ``llama_server``: building the command line of, starting and stopping ``llama-server``;
- ``client``: the streaming client every run uses.
"""
