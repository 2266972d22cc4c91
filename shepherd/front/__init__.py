"""Front ends (``run.py --front-ends K``): K processes answering the public port together (``SO_REUSEPORT``),
batching the client protocol to the head and forwarding everything else to it. Imports aiohttp, orjson and
`shepherd.wire.replies` only: never torch, SB3 or the graph (docs/front-ends.md)."""
