"""A bare aiohttp JSON echo server: the baseline a Shepherd step is compared with.

    python benchmarks/echo_server.py --port 0 [--json std|orjson|raw]

It parses the body of every POST as JSON and answers with the same object, serialised again (``--json raw``:
answers the body's bytes as they came, for binary bodies); it prints ``listening on PORT`` once ready.
Nothing else: no routing logic, no checks, no learner.
"""

import argparse
import json

import orjson
from aiohttp import web


def make_app(codec: str) -> web.Application:
    if codec == "raw":
        loads, dumps = bytes, bytes
    else:
        loads, dumps = (orjson.loads, orjson.dumps) if codec == "orjson" else (json.loads, lambda o: json.dumps(o).encode())

    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=dumps(loads(await request.read())), content_type="application/json")

    app = web.Application()
    app.router.add_post("/{tail:.*}", echo)
    return app


async def start(port: int, codec: str) -> None:
    runner = web.AppRunner(make_app(codec), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    print(f"listening on {runner.addresses[0][1]}", flush=True)


def main() -> None:
    import asyncio

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--json", choices=("std", "orjson", "raw"), default="orjson")
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    loop.run_until_complete(start(args.port, args.json))
    loop.run_forever()


if __name__ == "__main__":
    main()
